"""Waiting for a condition and reading the audit trail: the helpers every test shares.

``eventually`` replaces fixed sleeps and hand-written poll loops: it polls a check until it
holds or a deadline passes, then fails naming what it waited for (and any extra context).
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import select

from forager.db.engine import Database
from forager.db.models import CrawlAttempt, Event

Check = Callable[[], Awaitable[Any]] | Callable[[], Any]


async def eventually(
    check: Check,
    what: str,
    *,
    timeout: float = 60.0,
    every: float = 0.05,
    context: Callable[[], str] | None = None,
) -> Any:
    """Poll ``check`` (a coroutine function or a plain one) until it returns something truthy;
    return that value.

    Fails with ``timed out waiting for <what>`` (plus ``context()``, e.g. process logs) when
    ``timeout`` seconds pass first. The timeout is a safety net, never the thing tested.
    """
    try:
        async with asyncio.timeout(timeout):
            while not (value := await _result(check)):
                await asyncio.sleep(every)
            return value
    except TimeoutError:
        extra = f"\n{context()}" if context is not None else ""
        raise AssertionError(f"timed out waiting for {what}{extra}") from None


async def _result(check: Check) -> Any:
    value = check()
    return await value if inspect.isawaitable(value) else value


async def entity_events(db: Database, entity_type: str, entity_id: int | str) -> list[str]:
    """The event names recorded for one entity, oldest first."""
    async with db.reader() as session:
        rows = await session.scalars(
            select(Event.event)
            .where(Event.entity_type == entity_type, Event.entity_id == str(entity_id))
            .order_by(Event.id)
        )
        return list(rows)


async def event_rows(db: Database, entity_type: str, entity_id: int | str) -> list[Event]:
    """The event rows (name, details, actor…) recorded for one entity, oldest first."""
    async with db.reader() as session:
        rows = await session.scalars(
            select(Event)
            .where(Event.entity_type == entity_type, Event.entity_id == str(entity_id))
            .order_by(Event.id)
        )
        return list(rows)


async def task_attempts(db: Database, task_id: int) -> list[CrawlAttempt]:
    """Every fetch and parse attempt of one task, oldest first."""
    async with db.reader() as session:
        rows = await session.scalars(
            select(CrawlAttempt).where(CrawlAttempt.task_id == task_id).order_by(CrawlAttempt.id)
        )
        return list(rows)


async def event_details(
    db: Database, entity_type: str, entity_id: int | str
) -> list[tuple[str, Any]]:
    """``(event, details)`` pairs recorded for one entity, oldest first."""
    return [(e.event, e.details) for e in await event_rows(db, entity_type, entity_id)]


async def completions(db: Database) -> Counter[str]:
    """How many ``completed`` events each task has (by task id as text): exactly-once checks."""
    async with db.reader() as session:
        rows = await session.scalars(
            select(Event.entity_id).where(Event.entity_type == "task", Event.event == "completed")
        )
        return Counter(rows)
