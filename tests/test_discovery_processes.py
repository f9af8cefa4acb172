"""A crawl job across ``forager worker`` processes (issue 32): on PostgreSQL two of them hold
the pages budget exactly (the job row's lock) and fetch no URL twice; a worker killed with
SIGKILL mid-job loses no discovered link and queues none twice (a page's links are committed
with its result)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select

from forager.db.engine import Database
from forager.db.models import CrawlJob, CrawlTask, Event, Product
from forager.discovery import admin
from forager.discovery.jobs import start
from forager.queue.lifecycle import TERMINAL, TaskStatus
from tests.conftest import SettingsFactory
from tests.support import shop
from tests.support.site import TestSite
from tests.support.waiting import completions, eventually
from tests.support.workers import all_up, kill_worker, leased_by, logs, start_worker, stop_worker
from tests.test_discovery import job_tasks, shop_job

BUDGET = 30  # below the ~40 pages the shop's rules reach


async def _done(db: Database, job_id: int) -> bool:
    job, _ = await admin.show(db, job_id)
    return job.status == "done"


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # row locks: PostgreSQL's
async def test_two_workers_hold_the_budget_and_fetch_each_page_once(
    db: Database, make_settings: SettingsFactory, site: TestSite, tmp_path: Path
) -> None:
    settings = make_settings(lease_seconds=600.0, fetch_timeout_seconds=60.0)
    workers = [start_worker(settings, tmp_path, f"w{i}", concurrency=8) for i in range(2)]
    try:
        await all_up(db, workers, context=lambda: logs(tmp_path))
        job = await start(db, settings, shop_job(site, max_pages=BUDGET))
        await eventually(
            lambda: _done(db, job.id), "the job", timeout=120, context=lambda: logs(tmp_path)
        )
    finally:
        codes = [stop_worker(w) for w in workers]
    assert codes == [0, 0]
    async with db.reader() as session:
        tasks = list(await session.scalars(select(CrawlTask).where(CrawlTask.job_id == job.id)))
        row = await session.get(CrawlJob, job.id)
    assert row is not None
    assert len(tasks) == BUDGET
    assert row.pages_queued == BUDGET
    assert all(t.status in TERMINAL for t in tasks)
    fetched = Counter(r["path"] for r in site.log()["requests"] if r["path"].startswith("/shop"))
    assert len(fetched) == BUDGET
    assert set(fetched.values()) == {1}


async def _completed(db: Database, job_id: int, n: int) -> bool:
    async with db.reader() as session:
        done = await session.scalar(
            select(func.count())
            .select_from(CrawlTask)
            .where(CrawlTask.job_id == job_id, CrawlTask.status == TaskStatus.COMPLETED)
        )
    return (done or 0) >= n


async def test_a_worker_killed_mid_job_loses_no_link_and_queues_none_twice(
    db: Database, make_settings: SettingsFactory, site: TestSite, tmp_path: Path
) -> None:
    # A short lease: the killed worker's tasks come back within seconds. A crawl delay on the
    # shop's host stretches the job's ~40 pages over seconds, so the kill lands mid-job.
    settings = make_settings(
        lease_seconds=3.0,
        heartbeat_seconds=1.0,
        max_retries=10,
        default_crawl_delay_seconds=0.1,
        fetch_timeout_seconds=30.0,
    )
    # Both started at once (one start-up to wait for); the survivor takes the victim's pages
    # back when their leases expire.
    victim, survivor = (start_worker(settings, tmp_path, n, concurrency=8) for n in ("v", "s"))
    try:
        await all_up(db, [victim, survivor], context=lambda: logs(tmp_path))
        job = await start(db, settings, shop_job(site))
        await eventually(
            lambda: _completed(db, job.id, 8), "the job under way", context=lambda: logs(tmp_path)
        )
        await eventually(lambda: leased_by(db, victim), "the victim holding pages", every=0.005)
        kill_worker(victim)
        assert not await _done(db, job.id)  # mid-job indeed
        await eventually(
            lambda: _done(db, job.id), "the job", timeout=120, context=lambda: logs(tmp_path)
        )
    finally:
        kill_worker(victim)
        code = stop_worker(survivor)
    assert code == 0, logs(tmp_path)

    tasks = await job_tasks(db, job.id)
    ids = [t.id for t in tasks]
    assert all(t.status == TaskStatus.COMPLETED for t in tasks), [(t.url, t.status) for t in tasks]
    # Every product found, once; nothing lost of what an unbroken crawl reaches (the calendar
    # down to the job's depth), and nothing out of scope.
    products = sorted(int(t.url.rsplit("/", 1)[1]) for t in tasks if t.job_action == "parse")
    assert products == sorted(shop.products())
    assert sorted(t.depth for t in tasks if "/calendar" in t.url) == [1, 2, 3, 4]
    assert not [t.url for t in tasks if "127.0.0.2" in t.url or "sid=" in t.url]
    async with db.reader() as session:
        created = Counter(
            await session.scalars(
                select(Event.entity_id).where(Event.entity_type == "task", Event.event == "created")
            )
        )
        stored = await session.scalar(
            select(func.count(func.distinct(Product.url_hash))).where(
                Product.url_hash.in_([t.url_hash for t in tasks])
            )
        )
        row = await session.get(CrawlJob, job.id)
        expired = await session.scalar(
            select(func.count()).select_from(Event).where(Event.event == "lease_expired")
        )
    assert {int(i) for i in created} == set(ids) and set(created.values()) == {1}  # queued once
    assert set((await completions(db)).values()) == {1}  # completed once each
    assert stored == len(shop.products())
    assert row is not None and row.pages_queued == len(tasks)
    assert expired and expired > 0  # the kill did strand pages, and they were taken back
