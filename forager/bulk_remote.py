"""``forager submit --api URL``: the same lines as ``forager.bulk``, sent to a running server's
batch endpoint (``POST /api/tasks/batch``) instead of a database, so a load from any folder
reaches the server that crawls it.

Lines are read and checked as ``bulk.parse_line`` does; consecutive lines with the same options
go in one request (up to ``bulk.BATCH`` URLs), and each URL's result counts as it does locally.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from forager.api.task_schemas import TaskOptions
from forager.bulk import BATCH, Totals, numbered_lines, parse_line
from forager.errors import ConfigError
from forager.queue.door import SubmitSpec

_TIMEOUT = httpx.Timeout(120.0, connect=10.0)  # a batch of 1,000 URLs is one transaction


def _options(spec: SubmitSpec) -> dict[str, Any]:
    """The batch body's options of one line (everything but the URL), as JSON values."""
    options: dict[str, Any] = {}
    for name in TaskOptions.model_fields:
        value = getattr(spec, name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, tuple):
            value = list(value)
        options[name] = value
    return options


@dataclass(slots=True)
class _Batch:
    options: dict[str, Any]
    key: str
    lines: list[tuple[int, str]]  # (line number, URL)


class RemoteSubmit:
    """Sends the lines to ``base_url`` with ``api_key`` (an admin key)."""

    def __init__(self, base_url: str, api_key: str) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"--api must be the server's URL, like http://127.0.0.1:8000 (got {base_url!r})"
            )
        if not api_key:
            raise ConfigError(
                "--api needs an API key: pass --api-key or set FORAGER_API_KEY "
                "(create one on the server with `make apikey`)"
            )
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"}

    async def submit_lines(
        self,
        source: Iterable[str],
        defaults: dict[str, Any],
        *,
        progress: Callable[[int, Totals], None] = lambda _bytes, _totals: None,
    ) -> Totals:
        """Submit every line of ``source``; ``progress(bytes_read, totals)`` after each batch."""
        totals = Totals()
        read = 0
        batch: _Batch | None = None
        async with httpx.AsyncClient(
            base_url=self.base_url, headers=self.headers, timeout=_TIMEOUT
        ) as client:
            for number, size, text in numbered_lines(source):
                read += size
                if not text:
                    continue
                item = parse_line(text, defaults)
                if isinstance(item, str):
                    totals.count("invalid", number, item)
                    continue
                options = _options(item)
                key = json.dumps(options, sort_keys=True)
                if batch is not None and (batch.key != key or len(batch.lines) >= BATCH):
                    await self._send(client, batch, totals)
                    progress(read, totals)
                    batch = None
                if batch is None:
                    batch = _Batch(options, key, [])
                batch.lines.append((number, item.url))
            if batch is not None:
                await self._send(client, batch, totals)
        progress(read, totals)
        return totals

    async def _send(self, client: httpx.AsyncClient, batch: _Batch, totals: Totals) -> None:
        body = {**batch.options, "urls": [url for _, url in batch.lines]}
        try:
            response = await client.post("/api/tasks/batch", json=body)
        except httpx.HTTPError as exc:
            raise ConfigError(f"cannot reach the server at {self.base_url}: {exc}") from exc
        if response.status_code in (401, 403):
            raise ConfigError(
                f"the server at {self.base_url} refused the API key ({response.status_code}: "
                f"{_detail(response)}); submitting needs an admin key of that server's database "
                "(`make apikey` in its folder)"
            )
        if response.status_code != 200:
            raise ConfigError(
                f"the server at {self.base_url} answered {response.status_code}: "
                f"{_detail(response)}"
            )
        results = response.json()["results"]
        for (line, _), result in zip(batch.lines, results, strict=True):
            totals.count(result["result"], line, result.get("error"))


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail") or response.text[:200])
    except ValueError:
        return response.text[:200]
