"""Dispatch without polling on PostgreSQL: idle workers hear of new work through LISTEN/NOTIFY.

Every worker here polls every 30 s: a task done within 10 s of its submit was claimed because
the NOTIFY woke the worker, not because its poll came round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from sqlalchemy import text

from forager.db.engine import Database
from forager.queue.door import restart
from forager.worker.pool import WorkerPool
from tests.conftest import SettingsFactory
from tests.support.crawling import submit, tasks_by_id
from tests.support.site import TestSite
from tests.support.waiting import eventually

LONG_POLL = 30.0
WITHIN = 10.0  # the safety net of each wait; far below the poll


@pytest.fixture
def db_url(pg_database: str) -> str:
    """PostgreSQL only: SQLite has no LISTEN (``serve`` wakes its own workers in-process)."""
    return pg_database


async def _listening(db: Database) -> list[int]:
    """The server pids of the connections LISTENing in this test's database."""
    async with db.reader() as session:
        rows = await session.scalars(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
            )
        )
        return list(rows)


@asynccontextmanager
async def _running(pool: WorkerPool) -> AsyncIterator[WorkerPool]:
    runner = asyncio.create_task(pool.run())
    try:
        yield pool
    finally:
        pool.stop()
        await runner


async def _status(db: Database, task_id: int) -> str:
    return (await tasks_by_id(db, [task_id]))[task_id].status


async def test_an_idle_worker_claims_a_submit_at_once(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(poll_seconds=LONG_POLL)
    db = Database(settings.database_url)
    try:
        async with _running(WorkerPool(db, settings, concurrency=2)):
            await eventually(lambda: _listening(db), "the worker to LISTEN", timeout=WITHIN)
            [task_id] = await submit(db, settings, site.url("/product/1"))
            await eventually(
                lambda: _status_is(db, task_id, "completed"),
                "the submitted task to be crawled",
                timeout=WITHIN,
            )
            # A restart announces its work too.
            await restart(db, task_id)
            await eventually(
                lambda: _fetches(site, "/product/1") == 2,
                "the restarted task's fetch",
                timeout=WITHIN,
            )
    finally:
        await db.dispose()


async def test_the_listener_reconnects_when_its_connection_is_killed(
    make_settings: SettingsFactory, site: TestSite, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(poll_seconds=LONG_POLL)
    db = Database(settings.database_url)
    try:
        async with _running(WorkerPool(db, settings, concurrency=2)):
            [first] = await eventually(lambda: _listening(db), "the worker to LISTEN")
            async with db.session() as session:
                await session.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
            again = await eventually(
                lambda: _listening_other_than(db, first), "a new LISTEN connection"
            )
            assert first not in again
            [task_id] = await submit(db, settings, site.url("/product/2"))
            await eventually(
                lambda: _status_is(db, task_id, "completed"),
                "the task submitted after the reconnect to be crawled",
                timeout=WITHIN,
            )
    finally:
        await db.dispose()
    dropped = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 1 and dropped[0].levelno == logging.WARNING


async def test_with_listening_off_workers_poll(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(listen_notify=False, poll_seconds=0.2)
    db = Database(settings.database_url)
    try:
        pool = WorkerPool(db, settings, concurrency=2)
        assert pool.parts.listener is None
        async with _running(pool):
            [task_id] = await submit(db, settings, site.url("/product/3"))
            await eventually(
                lambda: _status_is(db, task_id, "completed"), "the poll to find the task"
            )
            assert await _listening(db) == []
    finally:
        await db.dispose()


async def _status_is(db: Database, task_id: int, status: str) -> bool:
    return await _status(db, task_id) == status


async def _listening_other_than(db: Database, pid: int) -> list[int]:
    pids = await _listening(db)
    return pids if pids and pid not in pids else []


def _fetches(site: TestSite, path: str) -> int:
    return sum(1 for r in site.requests() if r.path == path)
