"""Claiming: lease due tasks to a worker in one short transaction (DESIGN.md decision 1).

1. list candidate domains — active, past their politeness gate, breaker closed, with due
   pending work — ordered by their best task (priority 1 first, then ``scheduled_at``);
2. lock one candidate domain row (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite's
   ``BEGIN IMMEDIATE`` already serializes writers) and re-check its gate;
3. in one statement that begins after that lock was taken (so its snapshot sees every claim
   of the domain committed before: ``max_concurrent_requests`` holds across every worker
   process), count the domain's in-flight tasks and pick as many of its best pending tasks
   as there are free slots (``SELECT … LIMIT free FOR UPDATE SKIP LOCKED``);
4. lease them (``UPDATE … RETURNING``); a domain with a crawl delay gets one task and its
   gate closes until that request has been sent (``politeness.gate.open_after``).

With ``start`` the leased tasks go straight on to ``crawling`` (a worker that starts them at
once): both events are written, and the fetch needs no transaction of its own to begin.
Everything runs in the caller's transaction.

Each statement is built once per shape and run with new values (times, ids, limits as bound
parameters): building the candidates' statement and walking it for SQLAlchemy's cache key cost
~0.6 ms, the domain's lock ~0.3 ms, at every claim of every worker.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import BindParameter

from forager.config import Settings
from forager.db import audit, breakers
from forager.db.models import CrawlJob, CrawlTask, Domain, DomainProxy, SelectorMapVersion
from forager.db.types import UTCDateTime
from forager.fetch.fetcher_set import AUTO
from forager.parse.selectors import SELECTOR
from forager.politeness import gate
from forager.politeness.throttle import effective_delay
from forager.queue.adaptive import Adaptive
from forager.queue.lifecycle import FETCHING, TaskStatus
from forager.queue.routing import agent_fresh, claimable
from forager.queue.tasks import ClaimedTask

S = TaskStatus
# Candidate domains looked at per claim; more only matters when many are saturated at once.
_CANDIDATE_DOMAINS = 16

TASK_COLUMNS = (
    CrawlTask.id,
    CrawlTask.url,
    CrawlTask.url_hash,
    CrawlTask.status,
    CrawlTask.domain_id,
    CrawlTask.parser_name,
    CrawlTask.retry_count,
    CrawlTask.max_retries,
    CrawlTask.html_path,
    CrawlTask.is_recurring,
    CrawlTask.crawl_frequency_seconds,
    CrawlTask.adaptive_recrawl,
    CrawlTask.current_crawl_frequency_seconds,
    CrawlTask.min_crawl_frequency_seconds,
    CrawlTask.max_crawl_frequency_seconds,
    CrawlTask.unchanged_crawls,
    CrawlTask.job_id,
    CrawlTask.depth,
    CrawlTask.job_action,
    CrawlTask.fetch_request,
    # The crawl job's request profile (issue 33): over the domain's, under the task's own.
    select(CrawlJob.request_profile)
    .where(CrawlJob.id == CrawlTask.job_id)
    .scalar_subquery()
    .label("job_profile"),
)
_SELECTOR_FIELDS = (
    select(SelectorMapVersion.fields)
    .where(
        SelectorMapVersion.domain_id == Domain.id,
        SelectorMapVersion.version == Domain.selector_version,
    )
    .scalar_subquery()
    .label("selector_fields")
)
_MAPPED = exists().where(DomainProxy.domain_id == Domain.id, DomainProxy.source == "admin")
# What a claim needs of a domain (not its robots.txt text).
DOMAIN_COLUMNS = (
    Domain.id,
    Domain.domain_name,
    Domain.parser_name,
    Domain.user_agent,
    Domain.crawl_delay_seconds,
    Domain.throttle_delay_seconds,
    Domain.max_concurrent_requests,
    Domain.fetcher,
    Domain.auto_fetcher,
    Domain.wait_for_selector,
    Domain.ignore_robots,
    Domain.robots_txt_last_fetched,
    Domain.selector_version,
    Domain.request_profile,
    Domain.sticky_sessions,
    _SELECTOR_FIELDS,
    or_(Domain.use_global_pool.is_(True), Domain.required_country_code.is_not(None), _MAPPED).label(
        "uses_proxies"
    ),
)


def as_claimed(row: Any, domain: Any) -> ClaimedTask:
    """A leased row (``TASK_COLUMNS``) and its domain (``DOMAIN_COLUMNS``), as a worker holds it."""
    parser_name = row.parser_name or domain.parser_name
    selector = None
    if parser_name == SELECTOR and domain.selector_fields is not None:
        selector = (domain.id, domain.selector_version, domain.selector_fields)
    adaptive = None
    frequency = row.crawl_frequency_seconds
    if row.adaptive_recrawl and row.is_recurring:
        frequency = row.current_crawl_frequency_seconds or frequency
        adaptive = Adaptive(
            frequency,
            row.min_crawl_frequency_seconds or frequency,
            row.max_crawl_frequency_seconds or frequency,
            row.unchanged_crawls,
        )
    return ClaimedTask(
        id=row.id,
        url=row.url,
        url_hash=row.url_hash,
        status=row.status,
        domain_id=row.domain_id,
        domain_name=domain.domain_name,
        parser_name=parser_name,
        user_agent=domain.user_agent,
        crawl_delay_seconds=effective_delay(
            domain.crawl_delay_seconds, domain.throttle_delay_seconds
        ),
        retry_count=row.retry_count,
        max_retries=row.max_retries,
        html_path=row.html_path,
        is_recurring=row.is_recurring,
        crawl_frequency_seconds=frequency,
        fetcher=domain.fetcher,
        rung=domain.auto_fetcher,
        wait_for_selector=domain.wait_for_selector,
        uses_proxies=bool(domain.uses_proxies),
        ignore_robots=bool(domain.ignore_robots),
        robots_fetched_at=domain.robots_txt_last_fetched,
        selector=selector,
        adaptive=adaptive,
        job_id=row.job_id,
        depth=row.depth,
        job_action=row.job_action,
        domain_profile=domain.request_profile,
        fetch_request=row.fetch_request,
        sticky_sessions=domain.sticky_sessions,
        job_profile=row.job_profile,
    )


# The claim's times, bound at each run (``_times``).
_NOW = bindparam("b_now", type_=UTCDateTime())
_BREAKER_CUTOFF = bindparam("b_breaker_cutoff", type_=UTCDateTime())
_AGENT_FRESH = bindparam("b_agent_fresh", type_=UTCDateTime())
_DOMAIN_ID: BindParameter[int] = bindparam("b_domain_id")


def _times(settings: Settings, now: datetime) -> dict[str, Any]:
    return {
        "b_now": now,
        "b_breaker_cutoff": breakers.reopen_cutoff(settings, now),
        "b_agent_fresh": agent_fresh(settings, now),
    }


def _gate_open(by_agent: bool) -> list[Any]:
    return [
        Domain.is_active.is_(True),
        *gate.admits(_NOW, _BREAKER_CUTOFF),
        *claimable(_AGENT_FRESH, by_agent=by_agent),
    ]


def _fetched_with() -> ColumnElement[bool]:
    """Domains an agent with the fetchers ``b_kinds`` can fetch: its pinned fetcher is one of
    them, or it is ``auto`` and the fetcher auto remembers (None: http) is."""
    kinds: BindParameter[str] = bindparam("b_kinds", expanding=True)
    return or_(
        Domain.fetcher.in_(kinds),
        and_(Domain.fetcher == AUTO, func.coalesce(Domain.auto_fetcher, "http").in_(kinds)),
    )


@functools.cache
def _candidates(by_agent: bool, only: bool, fetchers: bool) -> Select[Any]:
    best_task = (
        select(CrawlTask.id)
        .where(
            CrawlTask.domain_id == Domain.id,
            CrawlTask.status == S.PENDING,
            CrawlTask.scheduled_at <= _NOW,
        )
        .order_by(CrawlTask.priority, CrawlTask.scheduled_at, CrawlTask.id)
        .limit(1)
        .scalar_subquery()
        .correlate(Domain)
    )
    ready = (
        select(Domain.id.label("domain_id"), best_task.label("task_id"))
        .where(
            *_gate_open(by_agent),
            *([Domain.domain_name.in_(bindparam("b_only", expanding=True))] if only else []),
            *([_fetched_with()] if fetchers else []),
        )
        .subquery()
    )
    return (
        select(ready.c.domain_id)
        .join(CrawlTask, CrawlTask.id == ready.c.task_id)
        .order_by(CrawlTask.priority, CrawlTask.scheduled_at, CrawlTask.id)
        .limit(_CANDIDATE_DOMAINS)
    )


async def candidate_domains(
    session: AsyncSession,
    settings: Settings,
    now: datetime,
    only: Sequence[str] | None = None,
    fetchers: Sequence[str] | None = None,
    *,
    by_agent: bool = False,
) -> list[int]:
    """Domains with due work whose gate is open, best task first; only those whose
    ``routing`` lets this claimer in (``queue/routing.py``: ``by_agent`` for an agent)."""
    values = _times(settings, now)
    if only is not None:
        values["b_only"] = list(only)
    if fetchers is not None:
        values["b_kinds"] = list(fetchers)
    statement = _candidates(by_agent, only is not None, fetchers is not None)
    return list((await session.execute(statement, values)).scalars())


def _room() -> ColumnElement[int]:
    """How many tasks the domain may start now: its free slots (``max_concurrent_requests``,
    ``b_max``, less its requests in flight), at most ``b_most``, never below 0. Evaluated
    inside the lease's statement, which begins after the domain's row lock was taken: its
    snapshot sees every claim of the domain committed before, so the limit holds across
    processes.

    A task stays ``crawling`` until its worker writes its result, after its page is parsed;
    ``answered`` are the claimer's own tasks whose request is already over (their page is
    being parsed or written), which hold no request slot. Every other claimer's tasks count
    until written, so the limit is never exceeded (the worker pool passes ``answered``,
    ``b_answered``, only while it claims alone: ``WorkerPool._claim``)."""
    free = bindparam("b_max", type_=Integer()) - func.count()
    most = bindparam("b_most", type_=Integer())
    return (
        select(case((free <= 0, 0), (free < most, free), else_=most))
        .select_from(CrawlTask)
        .where(
            CrawlTask.domain_id == _DOMAIN_ID,
            CrawlTask.status.in_(FETCHING),
            CrawlTask.id.not_in(bindparam("b_answered", expanding=True)),
        )
        .scalar_subquery()
    )


def _once(pick: Select[Any]) -> Select[Any]:
    """``pick`` (a ``FOR UPDATE SKIP LOCKED … LIMIT`` select) run once, for an ``UPDATE … WHERE
    id IN``: a materialized CTE. As a plain subquery PostgreSQL may rescan it per row, and a
    rescan skips the rows the update itself just changed and locks the next ones — more rows
    than the limit."""
    cte = pick.cte("pick").prefix_with("MATERIALIZED", dialect="postgresql")
    return select(cte.c.id)


# The domain's best ``_room`` due pending tasks, skipping rows another claim holds. (Not
# inside the ``UPDATE``: with a LIMIT it cannot know, PostgreSQL's plan for the update joined
# the picked ids against a scan of every pending task.)
_PICK = (
    select(CrawlTask.id)
    .where(
        CrawlTask.domain_id == _DOMAIN_ID,
        CrawlTask.status == S.PENDING,
        CrawlTask.scheduled_at <= _NOW,
    )
    .order_by(CrawlTask.priority, CrawlTask.scheduled_at, CrawlTask.id)
    .limit(_room())
    .with_for_update(skip_locked=True)
)


@functools.cache
def _locked_domain(by_agent: bool) -> Select[Any]:
    """The domain's row, locked, if its gate is still open."""
    return (
        select(*DOMAIN_COLUMNS)
        .where(Domain.id == _DOMAIN_ID, *_gate_open(by_agent))
        .with_for_update(skip_locked=True, of=Domain)
    )


def _leasing(picked: Any, was: str, becomes: str, **more: Any) -> Any:
    """The ``picked`` tasks still ``was`` leased to ``b_worker`` until ``b_until``, now
    ``becomes``; their rows back (``TASK_COLUMNS``)."""
    return (
        update(CrawlTask)
        .where(CrawlTask.id.in_(picked), CrawlTask.status == was)
        .values(
            status=becomes,
            lease_owner=bindparam("b_worker"),
            lease_expires_at=bindparam("b_until", type_=UTCDateTime()),
            updated_at=_NOW,
            **more,
        )
        .returning(*TASK_COLUMNS)
        .execution_options(synchronize_session=False)
    )


@functools.cache
def _lease(start: bool) -> Any:
    """The picked tasks (``b_ids``) leased, queued or (``start``) crawling."""
    picked: BindParameter[int] = bindparam("b_ids", expanding=True)
    if start:
        return _leasing(picked, S.PENDING, S.CRAWLING, started_at=_NOW)
    return _leasing(picked, S.PENDING, S.QUEUED)


async def claim_from_domain(
    session: AsyncSession,
    settings: Settings,
    domain_id: int,
    worker_id: str,
    now: datetime,
    limit: int,
    lease_until: datetime,
    *,
    start: bool = False,
    by_agent: bool = False,
    answered: Sequence[int] = (),
) -> list[ClaimedTask]:
    """Lease up to ``limit`` of one domain's due tasks, within its politeness budget (and
    its routing: ``by_agent`` for an agent's claim; ``answered``: ``_room``)."""
    values = {**_times(settings, now), "b_domain_id": domain_id}
    domain = (await session.execute(_locked_domain(by_agent), values)).one_or_none()
    if domain is None:  # another worker holds it, or its gate moved meanwhile
        return []
    # With a delay, one request per gate opening; without, fill the free slots.
    delay = effective_delay(domain.crawl_delay_seconds, domain.throttle_delay_seconds)
    most = min(limit, 1 if delay > 0 else limit)
    # The in-flight count rides in the pick's LIMIT: one statement, begun after the lock.
    room = {"b_max": domain.max_concurrent_requests, "b_most": most, "b_answered": list(answered)}
    task_ids = list((await session.execute(_PICK, {**values, **room})).scalars())
    if not task_ids:
        return []
    leased = {"b_ids": task_ids, "b_worker": worker_id, "b_until": lease_until, "b_now": now}
    rows = await session.execute(_lease(start), leased)
    tasks = [as_claimed(row, domain) for row in rows]
    if not tasks:
        return []
    if delay > 0:
        # Closed until the request is really on the wire (``politeness.gate``); a worker
        # that dies before sending leaves it closed only until its lease runs out.
        await gate.close_until(session, domain_id, lease_until)
    ids = [t.id for t in tasks]
    audit.record(session, "task", ids, S.QUEUED, {"to": S.QUEUED, "worker": worker_id})
    if start:
        audit.record(session, "task", ids, S.CRAWLING, {"to": S.CRAWLING, "worker": worker_id})
    return tasks


_LEASE_PARSE = _leasing(
    _once(
        select(CrawlTask.id)
        .where(CrawlTask.status == S.DOWNLOADED)
        .order_by(CrawlTask.priority, CrawlTask.scheduled_at, CrawlTask.id)
        .limit(bindparam("b_limit", type_=Integer()))
        .with_for_update(skip_locked=True)
    ),
    S.DOWNLOADED,
    S.QUEUED_PARSE,
)


async def claim_parse(
    session: AsyncSession, worker_id: str, now: datetime, limit: int, lease_until: datetime
) -> list[ClaimedTask]:
    """Lease downloaded tasks for the parse phase (restart-parsing, expired parse leases):
    one statement, and none more when there are none (the usual case)."""
    leased = {"b_limit": limit, "b_worker": worker_id, "b_until": lease_until, "b_now": now}
    rows = (await session.execute(_LEASE_PARSE, leased)).all()
    if not rows:
        return []
    domains = {
        d.id: d
        for d in await session.execute(
            select(*DOMAIN_COLUMNS).where(Domain.id.in_({r.domain_id for r in rows}))
        )
    }
    tasks = [as_claimed(row, domains[row.domain_id]) for row in rows]
    audit.record(
        session,
        "task",
        [t.id for t in tasks],
        S.QUEUED_PARSE,
        {"to": S.QUEUED_PARSE, "worker": worker_id},
    )
    return tasks


async def next_gate_opening(session: AsyncSession, now: datetime) -> datetime | None:
    """When the earliest closed politeness gate with due work opens (for idle sleeping)."""
    return await session.scalar(_NEXT_GATE_OPENING, {"b_now": now})


_NEXT_GATE_OPENING = select(func.min(Domain.next_fetch_at)).where(
    Domain.is_active.is_(True),
    Domain.next_fetch_at > _NOW,
    select(CrawlTask.id)
    .where(
        CrawlTask.domain_id == Domain.id,
        CrawlTask.status == S.PENDING,
        CrawlTask.scheduled_at <= _NOW,
    )
    .exists(),
)
