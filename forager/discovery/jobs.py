"""Starting a crawl job: its request checked, its row written and its start URLs queued (depth
0, followed) in one transaction."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from forager.config import Settings
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import CrawlJob, CrawlTask
from forager.db.types import utcnow
from forager.discovery.rules import LinkPolicy, Rule, check_rule
from forager.discovery.scope import SCOPES, scope_hosts
from forager.errors import InvalidRequest, InvalidURL, NotFound
from forager.queue.door import Discovery, TaskQueue
from forager.queue.urls import Link, NormalizedURL, normalize_url

# Limits a request may not exceed (the defaults are the request schema's).
MAX_START_URLS = 1000
MAX_RULES = 100
MAX_RERUN_EVERY = 366 * 86_400


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What an operator asks for; see ``docs/DISCOVERY.md``."""

    name: str
    start_urls: tuple[str, ...] = ()
    sitemap_urls: tuple[str, ...] = ()
    scope: str = "host"
    hosts: tuple[str, ...] = ()
    rules: tuple[dict[str, Any], ...] = field(default=())
    follow_nofollow: bool = False
    robots_sitemaps: bool = False
    max_depth: int = 5
    max_pages: int = 10_000
    max_duration_seconds: int = 86_400
    max_query_params: int = 3
    max_url_length: int = 512
    rerun_every_seconds: int | None = None  # a schedule: the next run this long after a start
    created_by: str = "api"
    # Headers, cookies and a user agent over the domains' profiles for every task of the job,
    # checked and sealed by the caller (``forager.domains.profile.seal``); None: the domains'.
    request_profile: dict[str, Any] | None = None


def _urls(raw: tuple[str, ...], name: str) -> list[NormalizedURL]:
    found = []
    for i, url in enumerate(raw):
        try:
            found.append(normalize_url(url))
        except InvalidURL as exc:
            raise InvalidRequest(f"{name}[{i}]: {exc.message}", field=name) from exc
    return found


def _check_range(value: int, name: str, low: int, high: int) -> None:
    if not low <= value <= high:
        raise InvalidRequest(f"{name} must be between {low} and {high}", field=name)


def check(spec: JobSpec) -> tuple[list[NormalizedURL], list[NormalizedURL], list[Rule]]:
    """The start URLs, sitemap URLs and rules of ``spec``, or ``InvalidRequest`` naming the
    field at fault."""
    if not spec.name.strip():
        raise InvalidRequest("name must not be empty", field="name")
    if not spec.start_urls and not spec.sitemap_urls:
        raise InvalidRequest("give start_urls, sitemap_urls or both", field="start_urls")
    if len(spec.start_urls) > MAX_START_URLS:
        raise InvalidRequest(f"at most {MAX_START_URLS} start_urls", field="start_urls")
    if spec.scope not in SCOPES:
        raise InvalidRequest(f"scope must be one of {', '.join(SCOPES)}", field="scope")
    if spec.scope == "hosts" and not spec.hosts:
        raise InvalidRequest("scope 'hosts' needs the hosts listed", field="hosts")
    if len(spec.rules) > MAX_RULES:
        raise InvalidRequest(f"at most {MAX_RULES} rules", field="rules")
    _check_range(spec.max_depth, "max_depth", 0, 100)
    _check_range(spec.max_pages, "max_pages", 1, 10_000_000)
    _check_range(spec.max_duration_seconds, "max_duration_seconds", 60, 90 * 86_400)
    _check_range(spec.max_query_params, "max_query_params", 0, 50)
    _check_range(spec.max_url_length, "max_url_length", 32, 2048)
    if spec.rerun_every_seconds is not None:
        _check_range(spec.rerun_every_seconds, "rerun_every_seconds", 60, MAX_RERUN_EVERY)
    rules = [check_rule(raw, i) for i, raw in enumerate(spec.rules)]
    return _urls(spec.start_urls, "start_urls"), _urls(spec.sitemap_urls, "sitemap_urls"), rules


def next_run(started: datetime, every: int | None) -> datetime | None:
    """When a scheduled job's next run is due: ``every`` seconds after this one started."""
    return None if every is None else started + timedelta(seconds=every)


async def start(db: Database, settings: Settings, spec: JobSpec) -> CrawlJob:
    """Check ``spec``, write the job and queue its start URLs; returns the job."""
    starts, sitemaps, rules = check(spec)
    start_hosts = [u.host for u in (*starts, *sitemaps)]
    now = utcnow()
    job = CrawlJob(
        name=spec.name.strip(),
        status="running",
        start_urls=[u.url for u in starts],
        sitemap_urls=[u.url for u in sitemaps],
        scope=spec.scope,
        hosts=scope_hosts(spec.scope, start_hosts, list(spec.hosts)),
        rules=[r.as_json() for r in rules],
        follow_nofollow=spec.follow_nofollow,
        robots_sitemaps=spec.robots_sitemaps,
        max_depth=spec.max_depth,
        max_pages=spec.max_pages,
        max_duration_seconds=spec.max_duration_seconds,
        max_query_params=spec.max_query_params,
        max_url_length=spec.max_url_length,
        pages_queued=0,
        links_seen=0,
        links_refused=0,
        started_at=now,
        ends_at=now + timedelta(seconds=spec.max_duration_seconds),
        rerun_every_seconds=spec.rerun_every_seconds,
        next_run_at=next_run(now, spec.rerun_every_seconds),
        created_by=spec.created_by,
        request_profile=spec.request_profile or None,
    )
    async with db.session() as session:
        session.add(job)
        await session.flush()
        audit.record(session, "crawl_job", [job.id], "created", {"name": job.name})
        links = [Link(u, "follow") for u in starts] + [Link(u, "sitemap") for u in sitemaps]
        await TaskQueue(db, settings).discover(session, [Discovery(job.id, None, 0, links)])
    async with db.reader() as session:
        fresh = await session.get(CrawlJob, job.id)
        assert fresh is not None
        return fresh


@dataclass(frozen=True, slots=True)
class StoredPage:
    task_id: int
    url: str
    html_path: str


async def preview_policy(
    db: Database, spec: JobSpec, task_id: int
) -> tuple[LinkPolicy, StoredPage]:
    """The link policy ``spec`` would give its pages (checked as a job's start is), and the
    stored page of task ``task_id`` to preview it on; the page's host is one of the start hosts.
    """
    async with db.reader() as session:
        task = await session.get(CrawlTask, task_id)
        if task is None:
            raise NotFound(f"task {task_id} does not exist")
        if task.html_path is None:
            raise NotFound(f"task {task_id} has no stored page")
        page = StoredPage(task.id, task.url, task.html_path)
    checked = dataclasses.replace(
        spec, name=spec.name or "preview", start_urls=(*spec.start_urls, page.url)
    )
    starts, sitemaps, rules = check(checked)
    hosts = scope_hosts(spec.scope, [u.host for u in (*starts, *sitemaps)], list(spec.hosts))
    policy = LinkPolicy(
        job_id=0,
        scope=spec.scope,
        hosts=tuple(hosts),
        rules=tuple(rules),
        follow_nofollow=spec.follow_nofollow,
        max_query_params=spec.max_query_params,
        max_url_length=spec.max_url_length,
    )
    return policy, page
