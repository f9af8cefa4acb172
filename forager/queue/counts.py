"""Task counts by status in O(statuses): read from trigger-kept counters, never from the tasks.

Triggers on ``crawl_tasks`` (migration 0010) append a signed delta row for every insert,
delete and change of status, priority or timing, whoever writes. ``fold`` moves the deltas
into ``task_counts`` (status, priority) and ``task_counts_hourly`` (creation hour, status);
readers add the deltas not folded yet, so every count is exact at its snapshot. Writers only
ever insert: no row is hot. The server folds every few seconds (``keep_folded``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select, text, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.engine import Database
from forager.db.models import TaskCount, TaskCountDelta, TaskCountHourly

log = logging.getLogger(__name__)
FOLD_CHUNK = 50_000  # deltas per fold transaction: bounds how long the write lock is held
FOLD_SECONDS = 5.0
_PG_FOLD_LOCK = 0x466F6C64  # any fixed number: one folder at a time per database

_PG_FOLD = text(
    """
    WITH gone AS (
        DELETE FROM task_count_deltas WHERE id IN (
            SELECT id FROM task_count_deltas ORDER BY id LIMIT :chunk FOR UPDATE SKIP LOCKED)
        RETURNING status, priority, created_hour, n, duration_n, duration_sum
    ), totals AS (
        INSERT INTO task_counts AS c (status, priority, n)
        SELECT status, priority, sum(n) FROM gone GROUP BY status, priority
        ON CONFLICT (status, priority) DO UPDATE SET n = c.n + excluded.n
    ), hourly AS (
        INSERT INTO task_counts_hourly AS h (hour, status, n, duration_n, duration_sum)
        SELECT created_hour, status, sum(n), sum(duration_n), sum(duration_sum)
        FROM gone GROUP BY created_hour, status
        ON CONFLICT (hour, status) DO UPDATE SET n = h.n + excluded.n,
            duration_n = h.duration_n + excluded.duration_n,
            duration_sum = h.duration_sum + excluded.duration_sum
    )
    SELECT count(*) FROM gone
    """
)
# SQLite: the fold runs under BEGIN IMMEDIATE, so no writer adds deltas meanwhile.
_SQLITE_FOLD = (
    "INSERT INTO task_counts (status, priority, n) "
    "SELECT status, priority, sum(n) FROM task_count_deltas WHERE id <= :last "
    "GROUP BY status, priority "
    "ON CONFLICT (status, priority) DO UPDATE SET n = n + excluded.n",
    "INSERT INTO task_counts_hourly (hour, status, n, duration_n, duration_sum) "
    "SELECT created_hour, status, sum(n), sum(duration_n), sum(duration_sum) "
    "FROM task_count_deltas WHERE id <= :last GROUP BY created_hour, status "
    "ON CONFLICT (hour, status) DO UPDATE SET n = n + excluded.n, "
    "duration_n = duration_n + excluded.duration_n, "
    "duration_sum = duration_sum + excluded.duration_sum",
    "DELETE FROM task_count_deltas WHERE id <= :last",
)
_EMPTY = (
    "DELETE FROM task_counts WHERE n = 0",
    "DELETE FROM task_counts_hourly WHERE n = 0 AND duration_n = 0",
)


async def _fold_chunk(session: AsyncSession) -> int:
    if session.get_bind().dialect.name == "postgresql":
        locked = await session.scalar(text(f"SELECT pg_try_advisory_xact_lock({_PG_FOLD_LOCK})"))
        if not locked:
            return 0  # another process is folding right now
        folded = int(await session.scalar(_PG_FOLD, {"chunk": FOLD_CHUNK}) or 0)
    else:
        chunk = select(TaskCountDelta.id).order_by(TaskCountDelta.id).limit(FOLD_CHUNK).subquery()
        last, folded = (
            await session.execute(select(func.max(chunk.c.id), func.count()).select_from(chunk))
        ).one()
        if not folded:
            return 0
        for statement in _SQLITE_FOLD:
            await session.execute(text(statement), {"last": last})
    for statement in _EMPTY:
        await session.execute(text(statement))
    return folded


async def fold(db: Database) -> None:
    """Move every pending delta into the counters, ``FOLD_CHUNK`` per transaction."""
    while True:
        async with db.session() as session:
            folded = await _fold_chunk(session)
        if folded < FOLD_CHUNK:
            return


async def keep_folded(db: Database, stop: asyncio.Event, every: float = FOLD_SECONDS) -> None:
    """Fold now and then every ``every`` seconds until ``stop`` is set (a side task of serve;
    it ends between folds, never inside one's transaction)."""
    while not stop.is_set():
        try:
            await fold(db)
        except Exception as exc:  # a busy or unreachable database: try again next round
            log.warning("folding task counts failed: %s", type(exc).__name__)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)


async def by_status_and_priority(session: AsyncSession) -> dict[tuple[str, int], int]:
    """``{(status, priority): tasks}``, exact at the session's snapshot."""
    both = union_all(
        select(TaskCount.status, TaskCount.priority, TaskCount.n),
        select(TaskCountDelta.status, TaskCountDelta.priority, TaskCountDelta.n),
    ).subquery()
    rows = await session.execute(
        select(both.c.status, both.c.priority, func.sum(both.c.n)).group_by(
            both.c.status, both.c.priority
        )
    )
    return {(status, priority): int(n) for status, priority, n in rows if n}


async def by_status(session: AsyncSession) -> dict[str, int]:
    """``{status: tasks}`` (statuses with no task are left out), exact at the snapshot."""
    return by_status_of(await by_status_and_priority(session))


def by_status_of(by_priority: dict[tuple[str, int], int]) -> dict[str, int]:
    """``by_status`` from a ``by_status_and_priority`` already read."""
    counts: dict[str, int] = {}
    for (status, _), n in by_priority.items():
        counts[status] = counts.get(status, 0) + n
    return {status: n for status, n in sorted(counts.items()) if n}


@dataclass(frozen=True, slots=True)
class StatusWindow:
    status: str
    count: int
    avg_duration_seconds: float | None


def hour_of(moment: datetime) -> int:
    """Hours since 1970 (UTC): the bucket ``task_counts_hourly`` keeps ``moment`` in."""
    return int(moment.astimezone(UTC).timestamp() // 3600)


def hour_start(hour: int) -> datetime:
    return datetime.fromtimestamp(hour * 3600, UTC)


async def created_since(session: AsyncSession, since_hour: int) -> list[StatusWindow]:
    """Tasks created from the start of hour ``since_hour`` on, by status, with mean durations."""
    h, d = TaskCountHourly, TaskCountDelta
    both = union_all(
        select(h.status, h.n, h.duration_n, h.duration_sum).where(h.hour >= since_hour),
        select(d.status, d.n, d.duration_n, d.duration_sum).where(d.created_hour >= since_hour),
    ).subquery()
    rows = await session.execute(
        select(
            both.c.status,
            func.sum(both.c.n),
            func.sum(both.c.duration_n),
            func.sum(both.c.duration_sum),
        )
        .group_by(both.c.status)
        .order_by(both.c.status)
    )
    return [
        StatusWindow(status, int(n), round(float(total) / int(timed), 3) if timed else None)
        for status, n, timed, total in rows
        if n
    ]
