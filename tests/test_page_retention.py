"""Page retention over both stores and both databases: the newest N pages per task and/or the
pages younger than D days are kept, a task's latest page never goes, rows stop pointing at a
page before it is deleted; the scheduler's job, ``forager pages prune`` and /metrics."""

from __future__ import annotations

import asyncio
import gzip
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlTask
from forager.db.types import utcnow
from forager.runtime import Runtime
from forager.store import packs
from forager.store.pages import PageStore
from forager.store.retention import Retention, prune
from forager.worker.pool import WorkerPool
from tests.conftest import SettingsFactory
from tests.support.cli import forager
from tests.support.crawling import submit
from tests.support.site import TestSite
from tests.support.waiting import eventually

# Per task, the age in days of each stored page, oldest first; the newest is the task's page.
AGES = {"a": [10, 5, 2, 0.05], "b": [30, 20]}


async def _seed(
    db: Database, settings: Settings, pages: PageStore, site: TestSite
) -> dict[str, Any]:
    """Two tasks with stored pages of ``AGES``; a parse attempt re-reads task a's oldest page.

    Returns the keys by task and age, and each key's stored size."""
    now = utcnow()
    keys: dict[tuple[str, float], str] = {}
    sizes: dict[str, int] = {}
    ids = await submit(db, settings, *(site.url(f"/product/{n}") for n in range(len(AGES))))
    async with db.session() as session:
        for task_id, (name, ages) in zip(ids, AGES.items(), strict=True):
            task = await session.get(CrawlTask, task_id)
            assert task is not None
            for age in ages:
                data = gzip.compress(f"<html>{name} {age}</html>".encode())
                key = await pages.put_gzip(task.url_hash, data)
                keys[name, age] = key
                sizes[key] = len(data)
                session.add(
                    CrawlAttempt(
                        task_id=task_id,
                        phase="fetch",
                        outcome="success",
                        started_at=now - timedelta(days=age),
                        page_path=key,
                        page_bytes=sizes[key],
                    )
                )
            await session.execute(
                update(CrawlTask)
                .where(CrawlTask.id == task_id)
                .values(html_path=key, status="completed")
            )
            if name == "a":
                session.add(
                    CrawlAttempt(
                        task_id=task_id,
                        phase="parse",
                        outcome="success",
                        started_at=now,
                        page_path=keys["a", 10],
                    )
                )
    return {"keys": keys, "sizes": sizes}


async def _present(pages: PageStore, keys: dict[tuple[str, float], str]) -> set[tuple[str, float]]:
    return {which for which, key in keys.items() if await pages.exists(key)}


async def _referenced(db: Database) -> set[str]:
    async with db.reader() as session:
        rows = await session.scalars(
            select(CrawlAttempt.page_path).where(CrawlAttempt.page_path.is_not(None))
        )
        return set(rows)


async def test_retention_rules_keep_what_they_promise(
    make_settings: SettingsFactory, page_store_settings: dict[str, Any], site: TestSite
) -> None:
    settings = make_settings(**page_store_settings)
    runtime = await Runtime.open(settings)
    db, pages = runtime.db, runtime.pages
    try:
        seeded = await _seed(db, settings, pages, site)
        keys, sizes = seeded["keys"], seeded["sizes"]
        everything = set(keys)
        both = Retention(keep_last=2, days=3)  # past both: a's 10 and 5 days old

        counted = await prune(db, pages, both, dry_run=True)
        assert (counted.pages, counted.bytes) == (2, sizes[keys["a", 10]] + sizes[keys["a", 5]])
        assert await _present(pages, keys) == everything  # a dry run deletes nothing

        pruned = await prune(db, pages, both)
        assert (pruned.pages, pruned.failed) == (2, 0)
        assert await _present(pages, keys) == everything - {("a", 10), ("a", 5)}
        # No row points at a deleted page, the parse attempt's included.
        referenced = await _referenced(db)
        assert keys["a", 10] not in referenced and keys["a", 5] not in referenced
        assert (await prune(db, pages, both)).pages == 0  # nothing left past both

        # Age alone: b's 30-day page goes, its 20-day one is b's latest page and stays.
        assert (await prune(db, pages, Retention(days=3))).pages == 1
        # Count alone: the newest page of each task.
        assert (await prune(db, pages, Retention(keep_last=1))).pages == 1  # a's 2-day page
        assert await _present(pages, keys) == {("a", 0.05), ("b", 20)}
        assert await _referenced(db) == {keys["a", 0.05], keys["b", 20]}
        for which in (("a", 0.05), ("b", 20)):
            assert b"<html>" in await pages.get(keys[which])
    finally:
        await runtime.aclose()


async def test_scheduler_prunes_and_stops_cooperatively(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(page_retention_keep_last=1, page_retention_interval_seconds=0.1)
    pool = WorkerPool(db, settings, concurrency=1)
    keys = (await _seed(db, settings, pool.pages, site))["keys"]
    runner = asyncio.create_task(pool.run())
    try:
        await eventually(
            lambda: _present_now(pool.pages, keys), "retention to delete all but the newest pages"
        )
    finally:
        pool.stop()
        await runner
    assert await _referenced(db) == {keys["a", 0.05], keys["b", 20]}


async def _present_now(pages: PageStore, keys: dict[tuple[str, float], str]) -> bool:
    return await _present(pages, keys) == {("a", 0.05), ("b", 20)}


def test_prune_command(
    tmp_path: Path,
    cli_env: dict[str, str],
    db_url: str,
    make_settings: SettingsFactory,
    site: TestSite,
) -> None:
    settings = make_settings()
    env = {**cli_env, "FORAGER_DATABASE_URL": db_url, "FORAGER_DATA_DIR": str(settings.data_dir)}

    async def seed() -> dict[tuple[str, float], str]:
        runtime = await Runtime.open(settings)
        try:
            keys: dict[tuple[str, float], str] = (
                await _seed(runtime.db, settings, runtime.pages, site)
            )["keys"]
            return keys
        finally:
            await runtime.aclose()

    keys = asyncio.run(seed())
    off = forager(tmp_path, env, "pages", "prune")
    assert off.returncode == 1 and "retention is off" in off.stderr
    dry = forager(tmp_path, env, "pages", "prune", "--dry-run", "--keep-last", "1")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would delete 4 stored pages (")
    assert all(packs.exists(settings.pages_dir, key) for key in keys.values())
    env["FORAGER_PAGE_RETENTION_DAYS"] = "3"
    done = forager(tmp_path, env, "pages", "prune")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("deleted 3 stored pages (")
    kept = {which for which, key in keys.items() if packs.exists(settings.pages_dir, key)}
    assert kept == {("a", 2), ("a", 0.05), ("b", 20)}


async def test_metrics_count_stored_pages_and_bytes(api: httpx.AsyncClient, site: TestSite) -> None:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    seeded = await _seed(runtime.db, runtime.settings, runtime.pages, site)
    text = (await api.get("/metrics")).text
    assert "forager_stored_pages 6\n" in text
    assert f"forager_stored_page_bytes {sum(seeded['sizes'].values())}\n" in text
