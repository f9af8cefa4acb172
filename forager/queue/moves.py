"""Named moves of a leased task, each a compare-and-set that writes its audit events.

The transaction rule: every function here runs inside the caller's transaction (it takes the
``session``) and never commits; ``TaskQueue`` (door.py) is what opens one transaction per
call for callers that have none. A move guarded by ``worker_id`` happens only while that worker
still holds the lease, so a worker whose lease expired, or whose task an operator paused or
cancelled, changes nothing.

``settle`` ends many tasks at once (the worker's writer): one locked read says which of them the
worker still holds, one statement writes their new rows (an ``UPDATE … FROM unnest(arrays)`` on
PostgreSQL, an ``executemany`` on SQLite, where a statement costs no round trip), and one
multi-row insert their tries' ``crawl_attempts`` rows (``attempts.py``). ``adapt`` then
moves the adaptive recrawl frequency of those that completed with a product record
(``queue/adaptive.py``): one more ``executemany`` in the same transaction, only when the group
holds such tasks.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    Integer,
    String,
    Table,
    Text,
    bindparam,
    case,
    func,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import audit
from forager.db.many import Many
from forager.db.models import CrawlTask
from forager.db.types import UTCDateTime, utcnow
from forager.errors import effect
from forager.queue import adaptive, attempts
from forager.queue.attempts import FetchAttempt
from forager.queue.lifecycle import LEASED, PARSE_LEASED, TaskStatus
from forager.queue.tasks import ClaimedTask

S = TaskStatus
_TASKS = cast(Table, CrawlTask.__table__)  # Core, not ORM: this is the hot path
# What a worker passes through between its fetch and its parse, inside one transaction.
FETCHED_VIA = (S.DOWNLOADED, S.QUEUED_PARSE, S.PARSING)


def retry_delay(settings: Settings, retry_count: int) -> float:
    """Exponential backoff with ±50 % jitter, capped at ``retry_max_seconds``."""
    base = settings.retry_base_seconds * (2**retry_count)
    capped: float = min(settings.retry_max_seconds, base)
    return capped * random.uniform(0.5, 1.5)


async def transition(
    session: AsyncSession,
    task_id: int,
    *,
    from_: Sequence[str],
    to: str,
    worker_id: str | None = None,
    event: str | None = None,
    details: dict[str, Any] | None = None,
    via: Sequence[str] = (),
    **values: Any,
) -> bool:
    """Compare-and-set ``task_id`` from one of ``from_`` to ``to``; write the event if it moved.

    ``via`` names statuses passed through inside this same transaction (no other session
    can observe them): each still gets its event, in order.
    """
    conditions = [_TASKS.c.id == task_id, _TASKS.c.status.in_(list(from_))]
    if worker_id is not None:
        conditions.append(_TASKS.c.lease_owner == worker_id)
    result = await session.execute(
        update(_TASKS).where(*conditions).values(status=to, updated_at=utcnow(), **values)
    )
    if not getattr(result, "rowcount", 0):
        return False
    base = {"worker": worker_id} if worker_id else {}
    for step in via:
        audit.record(session, "task", [task_id], step, {"to": step, **base})
    audit.record(session, "task", [task_id], event or to, {"to": to, **base, **(details or {})})
    return True


async def start_crawl(session: AsyncSession, task: ClaimedTask, worker_id: str) -> bool:
    """``queued → crawling``, just before the request goes out (agents; workers claim started)."""
    return await transition(
        session, task.id, from_=[S.QUEUED], to=S.CRAWLING, worker_id=worker_id, started_at=utcnow()
    )


async def to_parsing(session: AsyncSession, task: ClaimedTask, worker_id: str) -> bool:
    """``queued_parse → parsing``: a stored page is about to be parsed again."""
    return await transition(
        session, task.id, from_=[S.QUEUED_PARSE], to=S.PARSING, worker_id=worker_id
    )


async def postpone(
    session: AsyncSession, task: ClaimedTask, worker_id: str, *, reason: str, seconds: float
) -> bool:
    """``crawling → pending``, no retry spent (no proxy free now): back ``seconds`` later."""
    return await transition(
        session,
        task.id,
        from_=[S.CRAWLING],
        to=S.PENDING,
        worker_id=worker_id,
        event="postponed",
        details={"reason": reason},
        scheduled_at=utcnow() + timedelta(seconds=seconds),
        started_at=None,
        lease_owner=None,
        lease_expires_at=None,
    )


async def fail(
    session: AsyncSession,
    settings: Settings,
    task: ClaimedTask,
    worker_id: str,
    *,
    error_type: str,
    message: str,
    http_status_code: int | None = None,
) -> str | None:
    """Retry later with backoff, or fail for good; returns the new status (None: lost lease)."""
    ending = Ending(task, worker_id, LEASED, error=(error_type, message, http_status_code))
    return (await settle(session, settings, [ending])).get(task.id)


async def release(session: AsyncSession, task_id: int, worker_id: str) -> str | None:
    """Give a leased task back untouched (no retry spent); the status it went back to."""
    now = utcnow()
    back = case((_TASKS.c.status.in_(PARSE_LEASED), S.DOWNLOADED), else_=S.PENDING)
    result = await session.execute(
        update(_TASKS)
        .where(
            _TASKS.c.id == task_id,
            _TASKS.c.lease_owner == worker_id,
            _TASKS.c.status.in_(LEASED),
        )
        .values(
            status=back,
            lease_owner=None,
            lease_expires_at=None,
            started_at=None,
            scheduled_at=now,
            updated_at=now,
        )
        .returning(_TASKS.c.status)
    )
    status: str | None = result.scalar_one_or_none()
    if status is not None:
        audit.record(session, "task", [task_id], "released", {"to": status, "worker": worker_id})
    return status


async def heartbeat(session: AsyncSession, worker_id: str, until: datetime) -> int:
    """Extend the leases of every task ``worker_id`` holds to ``until``; returns how many."""
    result = await session.execute(
        update(_TASKS)
        .where(_TASKS.c.lease_owner == worker_id, _TASKS.c.status.in_(LEASED))
        .values(lease_expires_at=until)
    )
    return int(getattr(result, "rowcount", 0) or 0)


# -- many tasks at once ----------------------------------------------------------------------


@dataclass(slots=True)
class Ending:
    """How one leased task ends: completed (``error`` None) or failed with ``error``.

    ``via`` are the statuses it passes through first (a fetched page: downloaded → queued_parse
    → parsing); ``fetched`` the columns a stored fetch sets (page key, status, time, proxy).
    The rest is what the try leaves in ``crawl_attempts`` (``attempts.rows``): its request
    (``fetch_attempt``), the stored page it parsed again (``parse_page``), the validation rules
    its kept record breaks (``quality_issues``).
    """

    task: ClaimedTask
    worker_id: str
    from_: Sequence[str]
    error: tuple[str, str, int | None] | None = None  # error_type, message, HTTP status
    via: Sequence[str] = ()
    fetched: tuple[str | None, int, int, int | None] | None = None  # page key, status, ms, proxy
    not_before: float | None = None  # Retry-After seconds, when the site sent one
    fetch_attempt: FetchAttempt | None = None
    parse_page: str | None = None
    quality_issues: Sequence[str] = ()
    trace: str | None = None  # an internal failure's stack trace (kept on the task, bounded)


# An internal failure's stack trace is kept up to this many characters: its first lines (where
# the work started) and its last ones (where it failed), the middle cut out.
TRACE_LIMIT = 16_000


def bounded_trace(trace: str) -> str:
    """``trace`` cut to ``TRACE_LIMIT`` characters, keeping its head and its tail."""
    if len(trace) <= TRACE_LIMIT:
        return trace
    cut = "\n… (cut) …\n"
    head = TRACE_LIMIT // 4
    return trace[:head] + cut + trace[-(TRACE_LIMIT - head - len(cut)) :]


def _next_crawl(task: ClaimedTask, now: datetime) -> datetime | None:
    return now + timedelta(seconds=task.crawl_frequency_seconds) if task.is_recurring else None


def _param(name: str, type_: Any) -> Any:
    return bindparam(name, type_=type_)


# What settle writes per task, besides the shared ``b_now``: (name, type) of each value.
_ENDING_VALUES: tuple[tuple[str, Any], ...] = (
    ("b_id", BigInteger),
    ("b_status", String),
    ("b_retry_count", Integer),
    ("b_scheduled_at", UTCDateTime),
    ("b_completed_at", UTCDateTime),
    ("b_next_crawl_at", UTCDateTime),
    ("b_keep_started", Boolean),
    ("b_error_type", String),
    ("b_error_message", Text),
    ("b_error_trace", Text),
    ("b_http_status_code", Integer),
    ("b_html_path", String),
    ("b_response_time_ms", Integer),
    ("b_fetched", Boolean),
    ("b_proxy_id", BigInteger),
)


def _settle(row: Any, now: Any) -> Any:
    """The settle UPDATE, reading each task's values from ``row`` (by the names above)."""
    return (
        update(_TASKS)
        .where(_TASKS.c.id == row.b_id)
        .values(
            status=row.b_status,
            updated_at=now,
            lease_owner=None,
            lease_expires_at=None,
            retry_count=row.b_retry_count,
            scheduled_at=func.coalesce(row.b_scheduled_at, _TASKS.c.scheduled_at),
            completed_at=func.coalesce(row.b_completed_at, _TASKS.c.completed_at),
            next_crawl_at=row.b_next_crawl_at,
            started_at=case((row.b_keep_started, _TASKS.c.started_at), else_=None),
            error_type=row.b_error_type,
            error_message=row.b_error_message,
            error_trace=row.b_error_trace,
            http_status_code=row.b_http_status_code,
            html_path=func.coalesce(row.b_html_path, _TASKS.c.html_path),
            response_time_ms=func.coalesce(row.b_response_time_ms, _TASKS.c.response_time_ms),
            proxy_id=case((row.b_fetched, row.b_proxy_id), else_=_TASKS.c.proxy_id),
        )
    )


_NOW = _param("b_now", UTCDateTime)
# SQLite: one statement shape for every ending, so a whole group is one executemany (in
# process: a statement costs no round trip).
_SETTLE = Many(_settle(SimpleNamespace(**{n: _param(n, t) for n, t in _ENDING_VALUES}), _NOW))
# PostgreSQL: the whole group in one UPDATE … FROM unnest(one array per value). One shape
# whatever the group's size (prepared once per connection), where an executemany ran the
# UPDATE, and the task counters' trigger, once per task.
_ENDINGS = (
    func.unnest(*[_param(n, ARRAY(t)) for n, t in _ENDING_VALUES])
    .table_valued(*[n for n, _ in _ENDING_VALUES])
    .render_derived(name="endings")
)
_PG_SETTLE = _settle(_ENDINGS.c, _NOW)


async def _write_endings(session: AsyncSession, rows: list[dict[str, Any]], now: datetime) -> None:
    """The new rows of a group's tasks, in one statement (PostgreSQL) or one executemany."""
    if session.get_bind().dialect.name != "postgresql":
        await _SETTLE.execute(session, rows)
        return
    columns = {name: [row[name] for row in rows] for name, _ in _ENDING_VALUES}
    await session.execute(_PG_SETTLE, {"b_now": now, **columns})


# The group's tasks as they stand, locked (built once: the writer asks it every group).
_HELD = (
    select(_TASKS.c.id, _TASKS.c.status, _TASKS.c.lease_owner)
    .where(_TASKS.c.id.in_(bindparam("b_ids", expanding=True)))
    .with_for_update()
)


async def settle(
    session: AsyncSession, settings: Settings, endings: Sequence[Ending]
) -> dict[int, str]:
    """End every task of ``endings`` its worker still holds and record every try;
    ``{task id: new status}``.

    Tasks missing from the result were taken away (paused, cancelled, lease lost): nothing of
    them was written but their tries, ``discarded``.
    """
    if not endings:
        return {}
    locked = (await session.execute(_HELD, {"b_ids": [e.task.id for e in endings]})).all()
    held = {row.id: (row.status, row.lease_owner) for row in locked}
    now = utcnow()
    moved: dict[int, str] = {}
    rows: list[dict[str, Any]] = []
    for ending in endings:
        status, owner = held.get(ending.task.id, (None, None))
        if owner != ending.worker_id or status not in ending.from_:
            continue
        row, event, details = _ending_row(settings, ending, now)
        rows.append(row)
        moved[ending.task.id] = row["b_status"]
        base = {"worker": ending.worker_id}
        for step in ending.via:
            audit.record(session, "task", [ending.task.id], step, {"to": step, **base})
        audit.record(session, "task", [ending.task.id], event, details)
    if rows:
        await _write_endings(session, rows, now)
    await attempts.write(
        session,
        [
            row
            for e in endings
            for row in attempts.rows(
                e.task.id,
                e.worker_id,
                moved.get(e.task.id),
                error=e.error,
                fetch=e.fetch_attempt,
                parse_page=e.parse_page,
                quality_issues=e.quality_issues,
                now=now,
            )
        ],
    )
    return moved


def _ending_row(
    settings: Settings, ending: Ending, now: datetime
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    task = ending.task
    page_key, status_code, elapsed_ms, proxy_id = ending.fetched or (None, None, None, None)
    row: dict[str, Any] = {
        "b_id": task.id,
        "b_now": now,
        "b_retry_count": task.retry_count,
        "b_scheduled_at": None,
        "b_completed_at": now,
        "b_next_crawl_at": _next_crawl(task, now),
        "b_keep_started": True,
        "b_error_type": None,
        "b_error_message": None,
        "b_error_trace": None,
        "b_http_status_code": status_code,
        "b_html_path": page_key,
        "b_response_time_ms": elapsed_ms,
        "b_fetched": ending.fetched is not None,
        "b_proxy_id": proxy_id,
    }
    details: dict[str, Any] = {"worker": ending.worker_id}
    if ending.error is None:
        row["b_status"] = S.COMPLETED
        return row, S.COMPLETED, {"to": S.COMPLETED, **details}
    error_type, message, http_status = ending.error
    row |= {"b_error_type": error_type, "b_error_message": message[:2000]}
    if error_type == "internal" and ending.trace:
        row["b_error_trace"] = bounded_trace(ending.trace)
    if ending.fetched is None:
        row["b_http_status_code"] = http_status
    if effect(error_type).retry and task.retry_count < task.max_retries:
        wait = max(retry_delay(settings, task.retry_count), ending.not_before or 0.0)
        row |= {
            "b_status": S.PENDING,
            "b_retry_count": task.retry_count + 1,
            "b_scheduled_at": now + timedelta(seconds=wait),
            "b_completed_at": None,
            "b_next_crawl_at": None,
            "b_keep_started": False,
        }
        details |= {"error_type": error_type, "retry_count": task.retry_count + 1}
        return row, "retry_scheduled", {"to": S.PENDING, **details}
    row["b_status"] = S.FAILED
    return row, S.FAILED, {"to": S.FAILED, **details, "error_type": error_type}


_ADAPT = (
    update(_TASKS)
    .where(
        _TASKS.c.id == _param("b_id", Integer),
        _TASKS.c.status == S.COMPLETED,
        _TASKS.c.adaptive_recrawl.is_(True),  # switched off by an operator meanwhile: not moved
    )
    .values(
        current_crawl_frequency_seconds=_param("b_frequency", Integer),
        unchanged_crawls=_param("b_unchanged", Integer),
        crawl_frequency_reason=_param("b_reason", String),
        # Moved: from now at the new frequency; else settle's value (the same frequency) stands.
        next_crawl_at=case(
            (_param("b_moved", Boolean), _param("b_next_crawl_at", UTCDateTime)),
            else_=_TASKS.c.next_crawl_at,
        ),
    )
)


async def adapt(session: AsyncSession, signals: Sequence[tuple[ClaimedTask, str]]) -> None:
    """Move the frequency of adaptive tasks just completed by ``settle`` (same transaction)
    after what their crawl saw (``adaptive.step``); their ``next_crawl_at`` follows it."""
    rows = []
    now = utcnow()
    for task, signal in signals:
        if task.adaptive is None:
            continue
        after = adaptive.step(task.adaptive, signal)
        rows.append(
            {
                "b_id": task.id,
                "b_frequency": after.frequency,
                "b_unchanged": after.unchanged,
                "b_reason": after.reason,
                "b_moved": after.moved,
                "b_next_crawl_at": now + timedelta(seconds=after.frequency),
            }
        )
        if after.moved:
            audit.record(
                session,
                "task",
                [task.id],
                "recrawl_adapted",
                {"frequency_seconds": after.frequency, "reason": after.reason},
            )
    if rows:
        await session.execute(_ADAPT, rows)
