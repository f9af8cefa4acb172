"""Helpers to run the real worker pool in a test until the given tasks settle."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import select

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import CrawlTask, DomainProxy, Proxy
from forager.queue.door import SubmitSpec, submit_urls
from forager.queue.lifecycle import TERMINAL
from forager.worker.pool import WorkerPool
from tests.support.proxy import TestProxy

T = TypeVar("T")


async def submit(db: Database, settings: Settings, *urls: str, **options: Any) -> list[int]:
    """Submit ``urls`` and return their task ids (fails the test on an invalid URL)."""
    outcomes = await submit_urls(db, settings, [SubmitSpec(url, **options) for url in urls])
    bad = [o for o in outcomes if o.task_id is None]
    assert not bad, bad
    return [o.task_id for o in outcomes if o.task_id is not None]


async def tasks_by_id(db: Database, ids: Sequence[int]) -> dict[int, CrawlTask]:
    async with db.reader() as session:
        rows = await session.scalars(select(CrawlTask).where(CrawlTask.id.in_(list(ids))))
        return {t.id: t for t in rows}


async def run_pool_until(
    db: Database,
    settings: Settings,
    done: Callable[[], Awaitable[T | None]],
    *,
    concurrency: int = 8,
    timeout: float = 30.0,
    **pool_options: Any,
) -> T:
    """Run a worker pool until ``done()`` answers something other than None; that answer."""
    pool = WorkerPool(db, settings, concurrency=concurrency, **pool_options)
    runner = asyncio.create_task(pool.run())
    try:
        async with asyncio.timeout(timeout):
            while True:
                if (answer := await done()) is not None:
                    return answer
                if runner.done():
                    runner.result()
                    raise AssertionError("worker pool stopped early")
                await asyncio.sleep(0.05)
    finally:
        pool.stop()
        await runner


async def crawl(
    db: Database,
    settings: Settings,
    ids: Sequence[int],
    *,
    concurrency: int = 8,
    timeout: float = 30.0,
    statuses: Sequence[str] = TERMINAL,
    **pool_options: Any,
) -> dict[int, CrawlTask]:
    """Run a worker pool until every task in ``ids`` is in one of ``statuses``."""

    async def ended() -> dict[int, CrawlTask] | None:
        tasks = await tasks_by_id(db, ids)
        return tasks if all(t.status in statuses for t in tasks.values()) else None

    return await run_pool_until(
        db, settings, ended, concurrency=concurrency, timeout=timeout, **pool_options
    )


async def add_proxy(db: Database, settings: Settings, proxy: TestProxy, domain_id: int) -> int:
    """Store the loopback ``proxy`` (password encrypted) and map it to ``domain_id``; its id."""
    async with db.session() as session:
        row = Proxy(
            proxy_url="127.0.0.1",
            proxy_port=proxy.port,
            proxy_protocol="http",
            proxy_username=proxy.username,
            proxy_password=SecretBox(settings).encrypt(proxy.password) if proxy.password else None,
        )
        session.add(row)
        await session.flush()
        session.add(DomainProxy(domain_id=domain_id, proxy_id=row.id))
        return row.id
