"""Discovered links become tasks: deduplicated, within their job's budgets, in the caller's
transaction (issue 32).

The job rows are locked first, in id order (``FOR UPDATE`` on PostgreSQL; SQLite's
``BEGIN IMMEDIATE`` already serializes writers), so the room left under ``max_pages`` is read
and spent by one transaction at a time: any number of worker processes never queue more than
the budget. A URL already known (any task with its normalized URL's hash) is counted as seen
and not queued again; links past ``max_depth``, after the job's end or beyond its pages are
counted as refused. A page of a job that finishes after the job's end ends the job (``done``)
and cancels its waiting tasks: the duration holds however many processes crawl it.

A re-run of a job (``discovery.admin.rerun``) crawls again, of the job's own finished tasks,
only its entry points and sitemaps not yet fetched in this run, and the pages whose sitemap
``lastmod`` moved on since they were queued: what changed, not the whole site.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import audit
from forager.db.dialect import insert_ignoring_conflicts
from forager.db.models import CrawlJob, CrawlTask
from forager.db.types import utcnow
from forager.queue.lifecycle import TERMINAL, TaskStatus
from forager.queue.submit import domains_for
from forager.queue.urls import Link

S = TaskStatus
# Statuses of a job whose links are still queued (a paused job's wait, paused, for its resume).
_TAKING = {"running": S.PENDING, "paused": S.PAUSED}


@dataclass(frozen=True, slots=True)
class Discovery:
    """The links one page gave its job; ``depth`` is theirs (the page's + 1; start URLs: 0)."""

    job_id: int
    found_on: int | None
    depth: int
    links: Sequence[Link] = ()
    refused: int = 0  # links the parse process refused already (scope, rules, traps)


@dataclass(slots=True)
class Tally:
    """What ``enqueue`` did for one job."""

    queued: list[int] = field(default_factory=list)
    seen: int = 0
    refused: int = 0


async def enqueue(
    session: AsyncSession, settings: Settings, discoveries: Sequence[Discovery]
) -> dict[int, Tally]:
    """Insert the new links of ``discoveries`` as tasks within their jobs' budgets."""
    job_ids = sorted({d.job_id for d in discoveries})
    if not job_ids:
        return {}
    jobs = {
        j.id: j
        for j in await session.execute(
            select(
                CrawlJob.id,
                CrawlJob.status,
                CrawlJob.max_depth,
                CrawlJob.max_pages,
                CrawlJob.pages_queued,
                CrawlJob.started_at,
                CrawlJob.ends_at,
            )
            .where(CrawlJob.id.in_(job_ids))
            .order_by(CrawlJob.id)
            .with_for_update()
        )
    }
    now = utcnow()
    tallies: dict[int, Tally] = {}
    queued: dict[int, int] = {}
    ended: set[int] = set()
    for d in discoveries:
        job = jobs.get(d.job_id)
        if job is None:
            continue
        tally = tallies.setdefault(d.job_id, Tally())
        tally.seen += len(d.links)
        tally.refused += d.refused
        status = _TAKING.get(job.status)
        if status is not None and now >= job.ends_at and d.job_id not in ended:
            ended.add(d.job_id)  # its time is up: it ends, its waiting tasks with it
            await _end(session, d.job_id, now)
        if status is None or d.job_id in ended or d.depth > job.max_depth:
            tally.refused += len(d.links)
            continue
        unique = {link.where.url_hash: link for link in reversed(d.links)}  # the first kept
        if not unique:
            continue
        known = {
            row.url_hash: row
            for row in await session.execute(
                select(
                    CrawlTask.id,
                    CrawlTask.url_hash,
                    CrawlTask.job_id,
                    CrawlTask.status,
                    CrawlTask.completed_at,
                    CrawlTask.sitemap_lastmod,
                ).where(CrawlTask.url_hash.in_(list(unique)))
            )
        }
        fresh = [link for h, link in reversed(unique.items()) if h not in known]
        again = [
            (known[h], link)
            for h, link in reversed(unique.items())
            if h in known and _again(known[h], link, d, job.started_at)
        ]
        room = max(0, job.max_pages - job.pages_queued - queued.get(d.job_id, 0))
        tally.refused += max(0, len(fresh) + len(again) - room)
        again = again[:room]
        fresh = fresh[: room - len(again)]
        ids = [await _restart(session, row.id, link, status) for row, link in again]
        ids += await _insert(session, settings, d, fresh, status) if fresh else []
        queued[d.job_id] = queued.get(d.job_id, 0) + len(ids)
        tally.queued += ids
    for job_id, tally in tallies.items():
        before = jobs[job_id].pages_queued
        if before < jobs[job_id].max_pages <= before + len(tally.queued):
            # Its last page is spent (under the job row's lock: told once per run).
            details = {"budget": "max_pages", "max_pages": jobs[job_id].max_pages}
            audit.record(session, "crawl_job", [job_id], "budget_exhausted", details)
        await session.execute(
            update(CrawlJob)
            .where(CrawlJob.id == job_id)
            .values(
                pages_queued=CrawlJob.pages_queued + len(tally.queued),
                links_seen=CrawlJob.links_seen + tally.seen,
                links_refused=CrawlJob.links_refused + tally.refused,
                updated_at=now,
            )
        )
    return tallies


async def _end(session: AsyncSession, job_id: int, now: datetime) -> None:
    """A job past its ``max_duration_seconds`` is done; its waiting tasks are cancelled."""
    await session.execute(
        update(CrawlJob)
        .where(CrawlJob.id == job_id)
        .values(status="done", finished_at=now, updated_at=now)
    )
    moved = await move_job_tasks(session, job_id, "cancel")
    audit.record(
        session, "crawl_job", [job_id], "done", {"to": "done", "why": "duration", "tasks": moved}
    )


def _again(row: Any, link: Link, d: Discovery, run_started: datetime) -> bool:
    """A finished task of this job found again is crawled again when it is an entry point or a
    sitemap not fetched yet in this run, or when its sitemap ``lastmod`` moved on."""
    if row.job_id != d.job_id or row.status not in TERMINAL:
        return False
    if (d.depth == 0 or link.action == "sitemap") and (
        row.completed_at is None or row.completed_at < run_started
    ):
        return True
    return link.lastmod is not None and (
        row.sitemap_lastmod is None or link.lastmod > row.sitemap_lastmod
    )


async def _restart(session: AsyncSession, task_id: int, link: Link, status: str) -> int:
    now = utcnow()
    values: dict[str, Any] = {
        "status": status,
        "scheduled_at": now,
        "retry_count": 0,
        "error_type": None,
        "error_message": None,
        "completed_at": None,
        "updated_at": now,
    }
    if link.lastmod is not None:
        values["sitemap_lastmod"] = link.lastmod
    await session.execute(
        update(CrawlTask)
        .where(CrawlTask.id == task_id, CrawlTask.status.in_(TERMINAL))
        .values(**values)
    )
    audit.record(session, "task", [task_id], "restarted", {"to": status, "by": "crawl job"})
    return task_id


async def _insert(
    session: AsyncSession, settings: Settings, d: Discovery, links: Sequence[Link], status: str
) -> list[int]:
    domains = await domains_for(session, settings, [link.where for link in links])
    now = utcnow()
    rows: list[dict[str, Any]] = []
    for link in links:
        domain = domains[link.where.host]
        rows.append(
            {
                "domain_id": domain.id,
                "url": link.where.url,
                "url_hash": link.where.url_hash,
                "status": status,
                "priority": 5,
                "scheduled_at": now,
                "max_retries": settings.max_retries,
                "crawl_frequency_seconds": link.recrawl_seconds
                or domain.default_crawl_frequency_seconds,
                "is_recurring": link.recrawl_seconds is not None,
                "adaptive_recrawl": False,
                "unchanged_crawls": 0,
                "created_by": "discovery",
                "retry_count": 0,
                "recrawl_count": 0,
                "job_id": d.job_id,
                "found_on_task_id": d.found_on,
                "depth": d.depth,
                "job_action": link.action,
                "sitemap_lastmod": link.lastmod,
                "created_at": now,
                "updated_at": now,
            }
        )
    insert = insert_ignoring_conflicts(session, CrawlTask.__table__, on=["url_hash"])
    result = await session.execute(insert.returning(CrawlTask.__table__.c.id), rows)
    ids = list(result.scalars())
    audit.record(session, "task", ids, "created", {"to": status, "job_id": d.job_id})
    return ids


# The waiting tasks an operator's job action moves (leased ones finish their page first; the
# links they find wait paused, or are refused once the job is cancelled).
_JOB_MOVES = {
    "pause": ((S.PENDING,), S.PAUSED, "paused"),
    "resume": ((S.PAUSED,), S.PENDING, "resumed"),
    "cancel": ((S.PENDING, S.PAUSED), S.CANCELLED, "cancelled"),
}


async def move_job_tasks(session: AsyncSession, job_id: int, action: str) -> int:
    """Pause, resume or cancel a job's waiting tasks; returns how many moved."""
    from_, to, event = _JOB_MOVES[action]
    now = utcnow()
    values: dict[str, Any] = {"status": to, "updated_at": now}
    if to == S.PENDING:
        values["scheduled_at"] = now
    result = await session.execute(
        update(CrawlTask)
        .where(CrawlTask.job_id == job_id, CrawlTask.status.in_(from_))
        .values(**values)
        .returning(CrawlTask.id)
    )
    ids = list(result.scalars())
    audit.record(session, "task", ids, event, {"to": to, "job_id": job_id})
    return len(ids)
