"""Operating crawl jobs: list, show with progress, pause, resume, cancel.

Pausing holds the job's waiting tasks (``paused``) and queues the links its pages in flight
still find as paused; resuming gives them back to the queue; cancelling cancels its waiting
tasks, and links found afterwards are refused. A running job with no task left waiting or in
flight is ``done`` (marked when it is next read).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlJob, CrawlTask, Product
from forager.db.queries import get_or_not_found, page
from forager.db.types import utcnow
from forager.discovery.jobs import next_run
from forager.errors import Conflict
from forager.queue.door import Discovery, TaskQueue, move_job_tasks
from forager.queue.lifecycle import LEASED, WAITING, TaskStatus
from forager.queue.urls import Link, normalize_url

S = TaskStatus
# Which job statuses each action moves from, and to.
_ACTIONS = {
    "pause": (("running",), "paused"),
    "resume": (("paused",), "running"),
    "cancel": (("running", "paused"), "cancelled"),
}


@dataclass(slots=True)
class Progress:
    """A job's tasks: discovered (all of them), queued (waiting), in flight, fetched, parsed,
    products, errors — in all and by depth."""

    discovered: int = 0
    queued: int = 0
    in_flight: int = 0
    fetched: int = 0
    parsed: int = 0
    products: int = 0
    errors: int = 0
    by_depth: dict[int, dict[str, int]] = field(default_factory=dict)


def _not_found(job_id: int) -> str:
    return f"crawl job {job_id} does not exist"


# The job list's orders (``sort``): a leading "-" is descending; creation follows the id.
ORDERS: dict[str, tuple[Any, ...]] = {
    "-created": (CrawlJob.id.desc(),),
    "created": (CrawlJob.id.asc(),),
    "-name": (CrawlJob.name.desc(), CrawlJob.id.desc()),
    "name": (CrawlJob.name.asc(), CrawlJob.id.asc()),
    "-status": (CrawlJob.status.desc(), CrawlJob.id.desc()),
    "status": (CrawlJob.status.asc(), CrawlJob.id.asc()),
}


async def list_page(
    db: Database, *, limit: int, offset: int, sort: str = "-created"
) -> tuple[list[CrawlJob], int]:
    async with db.reader() as session:
        return await page(session, select(CrawlJob), *ORDERS[sort], limit=limit, offset=offset)


async def progress(session: AsyncSession, job_id: int) -> Progress:
    """The job's tasks counted by status and depth (the job's index: ``job_id, status``)."""
    result = Progress()
    rows = await session.execute(
        select(CrawlTask.depth, CrawlTask.status, CrawlTask.job_action, func.count())
        .where(CrawlTask.job_id == job_id)
        .group_by(CrawlTask.depth, CrawlTask.status, CrawlTask.job_action)
    )
    for depth, status, action, n in rows:
        level = result.by_depth.setdefault(
            depth or 0, {"discovered": 0, "fetched": 0, "parsed": 0, "errors": 0}
        )
        level["discovered"] += n
        result.discovered += n
        if status in WAITING or status == S.PAUSED:
            result.queued += n
        elif status in LEASED:
            result.in_flight += n
        elif status == S.COMPLETED:
            result.fetched += n
            level["fetched"] += n
            if action == "parse":
                result.parsed += n
                level["parsed"] += n
        elif status == S.FAILED:
            result.errors += n
            level["errors"] += n
    result.products = (
        await session.scalar(
            select(func.count())
            .select_from(Product)
            .join(CrawlTask, CrawlTask.url_hash == Product.url_hash)
            .where(CrawlTask.job_id == job_id)
        )
        or 0
    )
    # Pages fetched but failing their parse are in ``errors``; a page fetched at least once
    # counts as fetched whatever came of its parse.
    fetched_failed = await session.scalar(
        select(func.count(func.distinct(CrawlAttempt.task_id)))
        .join(CrawlTask, CrawlTask.id == CrawlAttempt.task_id)
        .where(
            CrawlTask.job_id == job_id,
            CrawlTask.status == S.FAILED,
            CrawlAttempt.status_code.is_not(None),
        )
    )
    result.fetched += fetched_failed or 0
    return result


async def show(db: Database, job_id: int) -> tuple[CrawlJob, Progress]:
    """The job and its progress; a running job with nothing left to do becomes ``done``."""
    async with db.reader() as session:
        job = await get_or_not_found(session, CrawlJob, job_id, _not_found(job_id))
        found = await progress(session, job_id)
    if job.status == "running" and found.queued == 0 and found.in_flight == 0:
        now = utcnow()
        async with db.session() as session:
            done = await session.execute(
                update(CrawlJob)
                .where(CrawlJob.id == job_id, CrawlJob.status == "running")
                .values(status="done", finished_at=now, updated_at=now)
            )
            if getattr(done, "rowcount", 0):
                audit.record(session, "crawl_job", [job_id], "done", {"to": "done"})
            job = await get_or_not_found(
                session, CrawlJob, job_id, _not_found(job_id), populate_existing=True
            )
    return job, found


async def rerun(db: Database, settings: Settings, job_id: int) -> CrawlJob:
    """Run a done or cancelled job again: a new run (budgets counted afresh, a new end), its
    start URLs and sitemaps fetched again; of the pages it knows, only those whose sitemap
    ``lastmod`` changed are crawled again (``queue/discovered.py``)."""
    job = await _run_again(db, settings, job_id, due=None)
    assert job is not None  # without ``due`` it runs or raises
    return job


async def _run_again(
    db: Database, settings: Settings, job_id: int, *, due: datetime | None
) -> CrawlJob | None:
    """``rerun``; with ``due`` (the scheduler), only a done job whose ``next_run_at`` is not
    after it, else None (another process started the run first)."""
    async with db.session() as session:
        job = await get_or_not_found(
            session, CrawlJob, job_id, _not_found(job_id), with_for_update=True
        )
        if due is not None and (
            job.status != "done" or job.next_run_at is None or job.next_run_at > due
        ):
            return None
        if job.status not in ("done", "cancelled"):
            raise Conflict(f"crawl job {job_id} is {job.status}; only a finished job runs again")
        now = utcnow()
        await session.execute(
            update(CrawlJob)
            .where(CrawlJob.id == job_id)
            .values(
                status="running",
                started_at=now,
                ends_at=now + timedelta(seconds=job.max_duration_seconds),
                finished_at=None,
                pages_queued=0,
                links_seen=0,
                links_refused=0,
                next_run_at=next_run(now, job.rerun_every_seconds),
                updated_at=now,
            )
        )
        entry = [Link(normalize_url(u), "follow") for u in job.start_urls]
        entry += [Link(normalize_url(u), "sitemap") for u in job.sitemap_urls]
        await TaskQueue(db, settings).discover(session, [Discovery(job_id, None, 0, entry)])
        by = "schedule" if due is not None else "operator"
        audit.record(session, "crawl_job", [job_id], "rerun", {"to": "running", "by": by})
    async with db.reader() as session:
        return await get_or_not_found(session, CrawlJob, job_id, _not_found(job_id))


async def rerun_due(db: Database, settings: Settings, now: datetime, limit: int = 100) -> list[int]:
    """Start the next run of each scheduled job whose ``next_run_at`` has come and whose last
    run is done (a run still going is left to finish); the ids of the jobs started."""
    async with db.reader() as session:
        due = list(
            await session.scalars(
                select(CrawlJob.id)
                .where(CrawlJob.next_run_at <= now, CrawlJob.status.in_(("running", "done")))
                .order_by(CrawlJob.next_run_at)
                .limit(limit)
            )
        )
    started = []
    for job_id in due:
        job, _ = await show(db, job_id)  # a run with nothing left to do is done now
        if job.status == "done" and await _run_again(db, settings, job_id, due=now) is not None:
            started.append(job_id)
    return started


async def act(db: Database, job_id: int, action: str) -> CrawlJob:
    """Pause, resume or cancel a job and its waiting tasks; ``Conflict`` from the wrong status."""
    from_, to = _ACTIONS[action]
    async with db.session() as session:
        job = await get_or_not_found(
            session, CrawlJob, job_id, _not_found(job_id), with_for_update=True
        )
        if job.status not in from_:
            raise Conflict(f"crawl job {job_id} is {job.status}; it cannot {action}")
        now = utcnow()
        await session.execute(
            update(CrawlJob)
            .where(CrawlJob.id == job_id)
            .values(
                status=to,
                updated_at=now,
                finished_at=now if to == "cancelled" else None,
            )
        )
        moved = await move_job_tasks(session, job_id, action)
        audit.record(session, "crawl_job", [job_id], to, {"to": to, "tasks": moved})
    async with db.reader() as session:
        return await get_or_not_found(session, CrawlJob, job_id, _not_found(job_id))
