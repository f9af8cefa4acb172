"""Workers report themselves here (start, heartbeat, stop) so /health can tell who is alive."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import psutil
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Worker
from forager.db.types import utcnow


async def report(
    db: Database,
    worker_id: str,
    *,
    kind: str,
    concurrency: int,
    in_flight: int,
    processed: int,
    stopped: bool = False,
    memory_bytes: int | None = None,
    cpu_percent: float | None = None,
    recycled: bool | None = None,
) -> None:
    """Record that ``worker_id`` is alive now (or, with ``stopped``, that it has stopped)."""
    now = utcnow()
    values: dict[str, object] = {
        "in_flight": in_flight,
        "processed": processed,
        "last_seen_at": now,
        "stopped_at": now if stopped else None,
    }
    if memory_bytes is not None:
        values |= {"memory_bytes": memory_bytes, "cpu_percent": cpu_percent}
    if recycled is not None:
        values["recycled"] = recycled
    async with db.session() as session:
        result = await session.execute(
            update(Worker).where(Worker.id == worker_id).values(**values)
        )
        if not getattr(result, "rowcount", 0):
            await session.execute(
                insert(Worker).values(
                    id=worker_id, kind=kind, concurrency=concurrency, started_at=now, **values
                )
            )


def alive_window(settings: Settings) -> timedelta:
    """A worker not seen for this long is considered gone."""
    return timedelta(seconds=max(60.0, 3 * settings.heartbeat_seconds))


async def live_workers(session: AsyncSession, since: datetime) -> list[Worker]:
    """Workers (processes that run tasks) seen since ``since`` and not stopped."""
    rows = await session.scalars(
        select(Worker)
        .where(
            Worker.last_seen_at >= since,
            Worker.stopped_at.is_(None),
            Worker.concurrency > 0,
        )
        .order_by(Worker.id)
    )
    return list(rows)


_PROCESSES: dict[int, psutil.Process] = {}


def process_tree_usage() -> tuple[int, float]:
    """RSS bytes and CPU percent of this process and its children (parse processes,
    Chromium), measured with psutil; CPU is since the previous call."""
    try:
        root = psutil.Process(os.getpid())
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0.0
    rss, cpu = 0, 0.0
    alive = set()
    for proc in procs:
        known = _PROCESSES.setdefault(proc.pid, proc)
        alive.add(proc.pid)
        try:
            rss += known.memory_info().rss
            cpu += known.cpu_percent(None)
        except psutil.Error:
            continue
    for pid in set(_PROCESSES) - alive:
        del _PROCESSES[pid]
    return rss, cpu
