"""``/api/progress``: the queue's or a batch's progress, estimated end, and why it waits.

The facts each domain's wait depends on are read here in a few grouped statements (pending
and in-flight counts per domain, the domains, their usable proxies, workers and agents), then
``waits.why`` names the limit. The rate is the tasks done in the last ten minutes, found by
the ``updated_at`` index (a done task is not written again).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.agents.admin import AgentStatus
from forager.api.deps import ReadSessionDep, RuntimeDep
from forager.api.progress_schemas import DomainWait, Progress
from forager.config import Settings
from forager.db import breakers
from forager.db.models import Agent, CrawlTask, Domain, DomainProxy, Proxy
from forager.db.types import utcnow
from forager.domains import robots
from forager.politeness.waits import DomainFacts, why
from forager.queue import counts
from forager.queue.lifecycle import FETCHING, TERMINAL
from forager.queue.lifecycle import TaskStatus as S
from forager.worker.presence import alive_window, live_workers

router = APIRouter(prefix="/api/progress", tags=["monitoring"])
RATE_WINDOW = timedelta(minutes=10)
MIN_SPAN = timedelta(seconds=30)  # a rate is never taken over less (a burst is not a pace)
MAX_DOMAINS = 50


@router.get("", operation_id="get_progress", response_model=Progress)
async def progress(
    session: ReadSessionDep,
    runtime: RuntimeDep,
    batch_name: Annotated[str | None, Query(max_length=255)] = None,
) -> Progress:
    """How far the queue is (or the tasks submitted with ``batch_name``): counts by status, a
    rate from the last ten minutes and the end it gives, and for each domain with work the
    one limit on its rate now — crawl delay, robots.txt Crawl-delay, adaptive throttle,
    concurrency limit, open circuit breaker, no usable proxy, no worker or agent — with its
    figure (``crawl delay 1 s per domain → at most 1 page/s; 180 pending``)."""
    now = utcnow()
    batch = [CrawlTask.batch_name == batch_name] if batch_name is not None else []
    if batch_name is None:
        by_status = {s: n for s, n in (await counts.by_status(session)).items() if n}
    else:
        rows = await session.execute(
            select(CrawlTask.status, func.count()).where(*batch).group_by(CrawlTask.status)
        )
        by_status = {str(s): int(n) for s, n in rows}
    total = sum(by_status.values())
    done = sum(by_status.get(s, 0) for s in TERMINAL)
    paused = by_status.get(S.PAUSED, 0)
    remaining = total - done - paused
    finished, oldest = (
        await session.execute(
            select(func.count(), func.min(CrawlTask.updated_at)).where(
                CrawlTask.updated_at >= now - RATE_WINDOW, CrawlTask.status.in_(TERMINAL), *batch
            )
        )
    ).one()
    rate = None
    end = None
    if finished:
        span = max(now - oldest, MIN_SPAN)
        rate = finished / (span.total_seconds() / 60)
        if remaining:
            end = now + timedelta(minutes=remaining / rate)
    return Progress(
        batch_name=batch_name,
        by_status=by_status,
        total=total,
        done=done,
        paused=paused,
        remaining=remaining,
        finished_recently=finished,
        rate_per_minute=None if rate is None else round(rate, 2),
        estimated_end=end,
        domains=await domain_waits(session, runtime.settings, now, batch),
    )


async def domain_waits(
    session: AsyncSession, settings: Settings, now: datetime, batch: list[Any]
) -> list[DomainWait]:
    """Why each domain with pending or in-flight tasks (of the batch) waits."""
    pending = CrawlTask.status == S.PENDING
    work = await session.execute(
        select(
            CrawlTask.domain_id,
            func.sum(case((pending, 1), else_=0)),
            func.sum(case((and_(pending, CrawlTask.scheduled_at <= now), 1), else_=0)),
            func.min(case((pending, CrawlTask.scheduled_at))),
        )
        .where(CrawlTask.status.in_((S.PENDING, *FETCHING)), *batch)
        .group_by(CrawlTask.domain_id)
        .order_by(func.count().desc(), CrawlTask.domain_id)
        .limit(MAX_DOMAINS)
    )
    found = {row[0]: row for row in work}
    if not found:
        return []
    ids = list(found)
    in_flight: dict[int, int] = {
        int(domain_id): int(n)
        for domain_id, n in await session.execute(
            select(CrawlTask.domain_id, func.count())
            .where(CrawlTask.domain_id.in_(ids), CrawlTask.status.in_(FETCHING))
            .group_by(CrawlTask.domain_id)
        )
    }
    domains = {d.id: d for d in await session.scalars(select(Domain).where(Domain.id.in_(ids)))}
    mapped = await _mapped_proxies(session, ids)
    pool = await _pool_proxies(session)
    workers = await live_workers(session, now - alive_window(settings))
    agents: dict[str, int] = {
        str(status): int(n)
        for status, n in await session.execute(
            select(Agent.status, func.count())
            .where(Agent.revoked_at.is_(None))
            .group_by(Agent.status)
        )
    }
    connected = sum(n for s, n in agents.items() if s in (AgentStatus.CONNECTED, AgentStatus.BUSY))
    out = []
    for domain_id, (_, pending_n, due_n, first_due) in found.items():
        domain = domains[domain_id]
        has_mapping = domain_id in mapped
        needs_proxy = has_mapping or domain.use_global_pool or bool(domain.required_country_code)
        usable = mapped.get(domain_id, 0) if has_mapping else _pool_count(pool, domain)
        facts = DomainFacts(
            domain=domain.domain_name,
            pending=int(pending_n or 0),
            due=int(due_n or 0),
            in_flight=in_flight.get(domain_id, 0),
            is_active=domain.is_active,
            crawl_delay=domain.crawl_delay_seconds,
            throttle_delay=domain.throttle_delay_seconds,
            robots_delay=_robots_delay(domain),
            max_concurrent=domain.max_concurrent_requests,
            breaker_open_until=_breaker_open_until(domain, settings, now),
            needs_proxy=needs_proxy,
            usable_proxies=usable,
            next_due_at=first_due,
            workers=len(workers),
            worker_slots=sum(w.concurrency for w in workers),
            workers_in_flight=sum(w.in_flight for w in workers),
            agents_connected=connected,
            agents_known=sum(agents.values()),
            routing=domain.routing,
        )
        wait = why(facts, now)
        out.append(
            DomainWait(
                domain_id=domain_id,
                domain=facts.domain,
                pending=facts.pending,
                due=facts.due,
                in_flight=facts.in_flight,
                reason=wait.reason,
                message=wait.message,
                max_pages_per_second=wait.max_pages_per_second,
            )
        )
    return out


def _robots_delay(domain: Domain) -> float | None:
    if domain.ignore_robots or not domain.robots_txt_content:
        return None
    return robots.crawl_delay(robots.parse(domain.robots_txt_content), domain.user_agent)


def _breaker_open_until(domain: Domain, settings: Settings, now: datetime) -> datetime | None:
    state = breakers.effective_state(domain.breaker_state, domain.breaker_opened_at, settings, now)
    if state != breakers.OPEN or domain.breaker_opened_at is None:
        return None
    return domain.breaker_opened_at + timedelta(seconds=settings.breaker_open_seconds)


async def _mapped_proxies(session: AsyncSession, ids: list[int]) -> dict[int, int]:
    """Per domain with proxies mapped by an operator, how many of them may be used."""
    rows = await session.execute(
        select(
            DomainProxy.domain_id,
            func.sum(case((and_(DomainProxy.is_active, Proxy.is_active), 1), else_=0)),
        )
        .join(Proxy, Proxy.id == DomainProxy.proxy_id)
        .where(DomainProxy.domain_id.in_(ids), DomainProxy.source == "admin")
        .group_by(DomainProxy.domain_id)
    )
    return {domain_id: int(n or 0) for domain_id, n in rows}


async def _pool_proxies(session: AsyncSession) -> dict[str | None, int]:
    """The enabled proxies of the global pool, by country."""
    rows = await session.execute(
        select(Proxy.country_code, func.count())
        .where(Proxy.is_active.is_(True))
        .group_by(Proxy.country_code)
    )
    return {country: int(n) for country, n in rows}


def _pool_count(pool: dict[str | None, int], domain: Domain) -> int:
    if domain.required_country_code:
        return pool.get(domain.required_country_code.upper(), 0)
    return sum(pool.values())
