"""A crawl job across two ``forager worker`` processes on PostgreSQL (issue 32): the pages
budget holds exactly (the job row's lock), and no URL is fetched or queued twice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from forager.db.engine import Database
from forager.db.models import CrawlJob, CrawlTask
from forager.discovery import admin
from forager.discovery.jobs import start
from forager.queue.lifecycle import TERMINAL
from tests.conftest import SettingsFactory
from tests.support.site import TestSite
from tests.support.waiting import eventually
from tests.support.workers import all_up, logs, start_worker, stop_worker
from tests.test_discovery import shop_job

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
