"""Crawl jobs (issue 32) end to end on both engines: a job started on the test site's shop finds
every product exactly once through the real worker pool and holds its scope and budgets (pause,
resume and cancel: tests/test_api_jobs.py; two processes: tests/test_discovery_processes.py)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlJob, CrawlTask, Product
from forager.db.types import utcnow
from forager.discovery import admin
from forager.discovery.jobs import JobSpec, check, start
from forager.errors import InvalidRequest
from forager.queue.door import restart_parsing
from forager.queue.lifecycle import TaskStatus
from forager.store.backend import open_page_store
from tests.support import shop
from tests.support.crawling import crawl, run_pool_until
from tests.support.site import TestSite

S = TaskStatus
RULES = (
    {"pattern": "/shop/c/[a-z]+$", "action": "follow"},
    {"pattern": "/shop/c/[a-z]+\\?page=\\d+$", "action": "follow"},
    {"pattern": "http://**/shop/p/*", "action": "parse", "syntax": "glob"},
    {"pattern": "/shop/calendar", "action": "follow"},
)


def shop_job(site: TestSite, **overrides: Any) -> JobSpec:
    values: dict[str, Any] = {
        "name": "shop",
        "start_urls": (site.url("/shop/"),),
        "rules": RULES,
        "max_depth": 4,
        "max_query_params": 1,
    }
    values.update(overrides)
    return JobSpec(**values)


async def run_job(db: Database, settings: Settings, job_id: int) -> admin.Progress:
    """Run a worker pool until the job has nothing waiting or in flight."""

    async def ended() -> admin.Progress | None:
        job, progress = await admin.show(db, job_id)
        return progress if job.status != "running" else None

    return await run_pool_until(db, settings, ended, concurrency=4, timeout=60)


async def job_tasks(db: Database, job_id: int) -> list[CrawlTask]:
    async with db.reader() as session:
        return list(await session.scalars(select(CrawlTask).where(CrawlTask.job_id == job_id)))


async def test_a_job_finds_every_product_once_within_scope(
    db: Database, settings: Settings, site: TestSite
) -> None:
    job = await start(db, settings, shop_job(site))
    progress = await run_job(db, settings, job.id)

    tasks = await job_tasks(db, job.id)
    urls = {t.url for t in tasks}
    products = sorted(int(t.url.rsplit("/", 1)[1]) for t in tasks if t.job_action == "parse")
    assert products == sorted(shop.products())
    assert all(t.status == S.COMPLETED for t in tasks), [(t.url, t.status) for t in tasks]
    # Scope, nofollow and the query-parameter limit (session ids) held; the calendar stopped at
    # the job's depth.
    assert not [u for u in urls if "127.0.0.2" in u or "sid=" in u or "/p/900" in u]
    calendar = sorted(t.depth for t in tasks if "/calendar" in t.url)
    assert calendar == [1, 2, 3, 4]
    assert max(t.depth or 0 for t in tasks) == 4
    # Lineage: every task but the start URL names the page it was found on.
    by_id = {t.id: t for t in tasks}
    for t in tasks:
        if t.depth == 0:
            assert t.found_on_task_id is None
        else:
            assert by_id[t.found_on_task_id].depth == t.depth - 1  # type: ignore[index]
    # Each product page fetched once; its product stored once.
    fetched = [r["path"] for r in site.log()["requests"] if r["path"].startswith("/shop/p/")]
    assert sorted(fetched) == sorted(f"/shop/p/{n}" for n in shop.products())
    async with db.reader() as session:
        stored = list(await session.scalars(select(Product.url)))
    assert len(stored) == len(shop.products())
    assert progress.products == len(shop.products())
    assert progress.parsed == len(shop.products())
    assert progress.discovered == len(tasks)
    async with db.reader() as session:
        row = await session.get(CrawlJob, job.id)
    assert row is not None
    assert row.status == "done"
    assert row.pages_queued == len(tasks)
    assert row.links_seen > row.pages_queued  # found again: counted, not queued

    # A listing parsed again from its stored page completes and queues nothing more.
    home = next(t for t in tasks if t.depth == 0)
    await restart_parsing(db, open_page_store(settings), home.id)
    reparsed = await crawl(db, settings, [home.id])
    assert reparsed[home.id].status == S.COMPLETED
    assert len(await job_tasks(db, job.id)) == len(tasks)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # PostgreSQL: two processes
async def test_the_pages_budget_holds(db: Database, settings: Settings, site: TestSite) -> None:
    job = await start(db, settings, shop_job(site, max_pages=6))
    await run_job(db, settings, job.id)
    tasks = await job_tasks(db, job.id)
    assert len(tasks) == 6
    async with db.reader() as session:
        row = await session.get(CrawlJob, job.id)
    assert row is not None
    assert row.pages_queued == 6
    assert row.links_refused > 0


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # no dialect-specific SQL here
async def test_a_job_past_its_duration_ends_and_queues_nothing_more(
    db: Database, settings: Settings, site: TestSite
) -> None:
    job = await start(db, settings, shop_job(site))
    async with db.session() as session:  # its time is up before its start page is crawled
        await session.execute(
            update(CrawlJob).where(CrawlJob.id == job.id).values(ends_at=utcnow())
        )
    await run_job(db, settings, job.id)
    tasks = await job_tasks(db, job.id)
    assert [(t.depth, t.status) for t in tasks] == [(0, S.COMPLETED)]
    async with db.reader() as session:
        row = await session.get(CrawlJob, job.id)
    assert row is not None
    assert (row.status, row.pages_queued) == ("done", 1)
    assert row.links_refused >= row.links_seen > 0  # every link it took was refused


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"start_urls": ()}, "start_urls"),
        ({"start_urls": ("ftp://x/",)}, "start_urls"),
        ({"scope": "planet"}, "scope"),
        ({"rules": ({"pattern": "(", "action": "follow"},)}, "rules[0]"),
        ({"rules": ({"pattern": "x", "action": "jump"},)}, "rules[0]"),
        ({"rules": ({"pattern": "x", "action": "follow", "region": "a[["},)}, "rules[0]"),
        ({"rules": ({"pattern": "x", "action": "follow", "recrawl_seconds": 3600},)}, "rules[0]"),
        ({"rules": ({"pattern": "x", "action": "parse", "recrawl_seconds": 5},)}, "rules[0]"),
        ({"max_depth": -1}, "max_depth"),
    ],
)
def test_bad_jobs_are_refused_naming_the_field(overrides: dict[str, Any], field: str) -> None:
    spec = JobSpec(**{"name": "shop", "start_urls": ("http://shop.test/",), **overrides})
    with pytest.raises(InvalidRequest) as refused:
        check(spec)
    assert refused.value.field == field
