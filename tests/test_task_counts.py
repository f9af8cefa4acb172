"""Trigger-kept task counters stay exact through every kind of write, on both engines."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import delete, func, select, update

from forager.config import Settings
from forager.db.dialect import seconds_between
from forager.db.engine import Database
from forager.db.models import CrawlTask, TaskCountDelta
from forager.db.types import utcnow
from forager.domains import admin as domains
from forager.queue import counts, door
from tests.support.crawling import submit


async def _truth(db: Database) -> dict[tuple[str, int], int]:
    """Counts straight from the task table: what the counters must always equal."""
    async with db.reader() as session:
        rows = await session.execute(
            select(CrawlTask.status, CrawlTask.priority, func.count()).group_by(
                CrawlTask.status, CrawlTask.priority
            )
        )
        return {(s, p): n for s, p, n in rows}


async def _counters(db: Database) -> dict[tuple[str, int], int]:
    async with db.reader() as session:
        return await counts.by_status_and_priority(session)


async def _assert_exact(db: Database) -> None:
    """Exact before a fold (deltas added on read) and after it (deltas gone)."""
    truth = await _truth(db)
    assert await _counters(db) == truth
    await counts.fold(db)
    assert await _counters(db) == truth
    async with db.reader() as session:
        assert await session.scalar(select(func.count()).select_from(TaskCountDelta)) == 0
        assert await counts.by_status(session) == {
            status: sum(n for (s, _), n in truth.items() if s == status)
            for status in sorted({s for s, _ in truth})
        }


async def test_counts_follow_inserts_updates_and_deletes(db: Database, settings: Settings) -> None:
    ids = await submit(db, settings, *(f"https://a.example/p/{n}" for n in range(12)))
    other = await submit(db, settings, "https://b.example/1", "https://b.example/2", priority=2)
    await _assert_exact(db)

    await door.pause(db, ids[0])  # one row, through the lifecycle
    await door.set_priority(db, ids[1], 9)
    await _assert_exact(db)

    async with db.session() as session:  # set-based: many rows in one statement
        await session.execute(
            update(CrawlTask)
            .where(CrawlTask.id.in_(ids[2:10]))
            .values(status="failed", started_at=utcnow(), completed_at=utcnow())
        )
        # An update that moves nothing counted (a lease renewal) leaves no delta.
        before = await session.scalar(select(func.count()).select_from(TaskCountDelta))
        await session.execute(
            update(CrawlTask)
            .where(CrawlTask.id.in_(ids))
            .values(lease_expires_at=utcnow() + timedelta(seconds=30))
        )
        after = await session.scalar(select(func.count()).select_from(TaskCountDelta))
        assert before == after
    assert await door.restart_failed(db, limit=3)
    await _assert_exact(db)

    domain_id = (await _task(db, other[0])).domain_id
    await domains.remove(db, domain_id)  # deletes the domain's tasks with it
    async with db.session() as session:
        await session.execute(delete(CrawlTask).where(CrawlTask.id == ids[11]))
    await _assert_exact(db)
    assert sum((await _counters(db)).values()) == 11


async def _task(db: Database, task_id: int) -> CrawlTask:
    async with db.reader() as session:
        task = await session.get(CrawlTask, task_id)
        assert task is not None
        return task


async def test_counts_stay_exact_under_concurrent_writers(db: Database, settings: Settings) -> None:
    async def writer(n: int) -> None:
        mine = await submit(db, settings, *(f"https://w{n}.example/{i}" for i in range(10)))
        for task_id in mine[::2]:
            await door.cancel(db, task_id)
        async with db.session() as session:
            await session.execute(
                update(CrawlTask).where(CrawlTask.id.in_(mine[1::2])).values(priority=1)
            )

    async def folder() -> None:
        for _ in range(5):
            await counts.fold(db)
            await asyncio.sleep(0.01)

    await asyncio.gather(*(writer(n) for n in range(6)), folder(), folder())
    await _assert_exact(db)
    assert (await _counters(db))[("cancelled", 5)] == 30


async def test_window_counts_and_mean_durations(db: Database, settings: Settings) -> None:
    ids = await submit(db, settings, *(f"https://c.example/{n}" for n in range(4)))
    now = utcnow()
    async with db.session() as session:
        for seconds, task_id in ((2.0, ids[0]), (4.0, ids[1])):
            await session.execute(
                update(CrawlTask)
                .where(CrawlTask.id == task_id)
                .values(
                    status="completed",
                    started_at=now - timedelta(seconds=seconds),
                    completed_at=now,
                )
            )
        await session.execute(  # created two days ago: outside a one-day window
            update(CrawlTask)
            .where(CrawlTask.id == ids[3])
            .values(created_at=now - timedelta(days=2))
        )
    since = counts.hour_of(now - timedelta(days=1))
    for _ in range(2):  # before and after the fold
        async with db.reader() as session:
            window = {w.status: w for w in await counts.created_since(session, since)}
            duration = seconds_between(session, CrawlTask.started_at, CrawlTask.completed_at)
            expected = await session.scalar(
                select(func.avg(duration)).where(CrawlTask.status == "completed")
            )
        assert window["completed"].count == 2
        assert window["completed"].avg_duration_seconds == round(float(expected), 3) == 3.0
        assert (window["pending"].count, window["pending"].avg_duration_seconds) == (1, None)
        await counts.fold(db)
