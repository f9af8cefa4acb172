"""A task's tries as ``crawl_attempts`` rows: the typed record a worker fills while it fetches,
and the rules that give each row its outcome from the status the task's move left it in.

``settle`` (moves.py) writes the rows of a group's endings in the same transaction as their
moves: one multi-row Core insert (no ORM mapper per row). A try taken away meanwhile (paused,
cancelled, lease lost: no new status) is ``discarded``. The reaper writes the lost tries of
expired leases itself (scheduler.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.many import Many
from forager.db.models import CrawlAttempt
from forager.queue.lifecycle import TaskStatus

S = TaskStatus
_ATTEMPTS = cast(Table, CrawlAttempt.__table__)  # Core, not ORM: this is the hot path
_INSERT = Many(insert(_ATTEMPTS))
# Every row names every column: one statement shape for the whole group.
_COLUMNS = (
    "task_id",
    "worker_id",
    "proxy_id",
    "phase",
    "started_at",
    "finished_at",
    "outcome",
    "status_code",
    "response_time_ms",
    "bytes_received",
    "final_url",
    "page_path",
    "page_bytes",
    "error_type",
    "error_message",
)


@dataclass(slots=True)
class FetchAttempt:
    """One request of a task as its worker saw it: its ``crawl_attempts`` row but for the outcome
    and error, which the task's move decides."""

    started_at: datetime
    finished_at: datetime
    proxy_id: int | None = None
    status_code: int | None = None
    response_time_ms: int | None = None
    bytes_received: int | None = None
    final_url: str | None = None
    page_path: str | None = None  # the page as stored
    page_bytes: int | None = None  # its size in the store


def outcome(status: str | None) -> str:
    """A failed try's outcome from the status its task went to (None: taken away)."""
    if status == S.PENDING:
        return "retry"
    return "failed" if status == S.FAILED else "discarded"


def rows(
    task_id: int,
    worker_id: str,
    status: str | None,
    *,
    error: tuple[str, str, int | None] | None,
    fetch: FetchAttempt | None,
    parse_page: str | None,
    quality_issues: Sequence[str],
    now: datetime,
) -> list[dict[str, Any]]:
    """The rows of one try whose task went to ``status``: its fetch, if a request went out, and
    a parse row for a stored page parsed again, or for a kept record that breaks validation
    rules (``quality_issues``)."""
    error_type, message, _ = error or (None, None, None)
    found: list[dict[str, Any]] = []
    if fetch is not None:
        found.append(
            _row(
                task_id=task_id,
                worker_id=worker_id,
                phase="fetch",
                started_at=fetch.started_at,
                finished_at=fetch.finished_at,
                outcome="success" if status == S.COMPLETED else outcome(status),
                proxy_id=fetch.proxy_id,
                status_code=fetch.status_code,
                response_time_ms=fetch.response_time_ms,
                bytes_received=fetch.bytes_received,
                final_url=fetch.final_url,
                page_path=fetch.page_path,
                page_bytes=fetch.page_bytes,
                error_type=error_type,
                error_message=message,
            )
        )
    if parse_page is None and not quality_issues:
        return found
    parse = {
        "task_id": task_id,
        "worker_id": worker_id,
        "phase": "parse",
        "started_at": now,
        "finished_at": now,
        "page_path": parse_page or (fetch.page_path if fetch else None),
    }
    if status == S.COMPLETED and quality_issues:
        # Kept as extracted; the parse attempt says which validation rules it breaks.
        issues = "; ".join(quality_issues)
        found.append(
            _row(**parse, outcome="validation", error_type="validation", error_message=issues)
        )
    elif status == S.COMPLETED and parse_page is not None:
        found.append(_row(**parse, outcome="success"))
    elif parse_page is not None and error is not None:
        found.append(
            _row(**parse, outcome=outcome(status), error_type=error_type, error_message=message)
        )
    return found


async def write(session: AsyncSession, found: list[dict[str, Any]]) -> None:
    """Insert ``found`` (from ``rows``) in the caller's transaction, one multi-row insert."""
    if found:
        await _INSERT.execute(session, found)


def _row(**values: Any) -> dict[str, Any]:
    row = dict.fromkeys(_COLUMNS)
    row.update(values)
    return row
