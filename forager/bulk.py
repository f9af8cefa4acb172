"""``forager submit FILE|-``: bulk loads without the API, through the API's own submit path.

Each line is a URL, or a JSON object with a ``url`` and the options the API's
``POST /api/tasks`` takes (``priority``, ``is_recurring``, ``crawl_frequency_seconds``,
``adaptive_recrawl`` and its ``min_`` / ``max_crawl_frequency_seconds``, ``max_retries``,
``scheduled_at``, ``parser_name``, ``batch_name``, ``tags``), validated by the same schema.
Blank lines and ``#`` comments are skipped. Lines go to the queue (``submit_urls``) in batches
(one transaction each; their tags in one more), so a load of millions of lines never holds them
all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from forager.api.task_schemas import TaskCreate, TaskOptions
from forager.api.wire import message_of
from forager.config import Settings
from forager.db.engine import Database
from forager.errors import InvalidRequest
from forager.products import tags
from forager.queue.door import SubmitSpec, submit_urls

BATCH = 1000  # lines per transaction


@dataclass(slots=True)
class Totals:
    created: int = 0
    duplicate: int = 0
    invalid: int = 0
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line number, why)

    def count(self, result: str, line: int, error: str | None = None) -> None:
        if result == "created":
            self.created += 1
        elif result == "duplicate":
            self.duplicate += 1
        else:
            self.invalid += 1
            self.problems.append((line, error or "invalid"))


def defaults(**options: Any) -> dict[str, Any]:
    """The options given on the command line, checked like an API body (``InvalidRequest``)."""
    given = {k: v for k, v in options.items() if v is not None}
    try:
        TaskOptions.model_validate(given)
    except ValidationError as exc:
        raise InvalidRequest(_why(exc), field="options") from exc
    return given


def _why(exc: ValidationError) -> str:
    return "; ".join(
        (".".join(str(p) for p in err["loc"]) + ": " if err["loc"] else "") + message_of(err)
        for err in exc.errors()
    )


def parse_line(text: str, options: dict[str, Any]) -> SubmitSpec | str:
    """One line's task, or why it is not one. A plain URL's own problems are reported by the
    submit path (the API's wording); a JSON line is checked by the API's schema first."""
    if not text.startswith("{"):  # ``options`` were checked by ``defaults``
        return SubmitSpec(
            url=text, created_by="cli", **{**options, "tags": tuple(options.get("tags", ()))}
        )
    try:
        given = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not valid JSON: {exc.msg} (column {exc.colno})"
    if not isinstance(given, dict):
        return "a JSON line must be an object with a url"
    try:
        body = TaskCreate.model_validate({**options, **given})
    except ValidationError as exc:
        return _why(exc)
    if body.restart:
        return "restart: forager submit does not restart known tasks (POST /api/tasks/batch does)"
    return body.spec(body.url, created_by="cli")


def numbered_lines(source: Iterable[str]) -> Iterator[tuple[int, int, str]]:
    """(line number, bytes read, text) of each line that is not blank or a comment."""
    for number, raw in enumerate(source, 1):
        text = raw.strip()
        if text and not text.startswith("#"):
            yield number, len(raw.encode()), text
        elif raw:
            yield number, len(raw.encode()), ""


async def submit_lines(
    db: Database,
    settings: Settings,
    source: Iterable[str],
    options: dict[str, Any],
    *,
    progress: Callable[[int, Totals], None] = lambda _bytes, _totals: None,
) -> Totals:
    """Submit every line of ``source``; ``progress(bytes_read, totals)`` after each batch."""
    totals = Totals()
    batch: list[tuple[int, SubmitSpec]] = []
    read = 0

    async def flush() -> None:
        specs = [spec for _, spec in batch]
        outcomes = await submit_urls(db, settings, specs)
        await tags.tag_submitted(db, specs, outcomes)
        for (line, _), outcome in zip(batch, outcomes, strict=True):
            totals.count(outcome.result, line, outcome.error)
        batch.clear()
        progress(read, totals)

    for number, size, text in numbered_lines(source):
        read += size
        if not text:
            continue
        item = parse_line(text, options)
        if isinstance(item, str):
            totals.count("invalid", number, item)
            continue
        batch.append((number, item))
        if len(batch) >= BATCH:
            await flush()
    if batch:
        await flush()
    progress(read, totals)
    return totals
