"""Seed §10.3's audit queries over the ``events`` table: a mission's timeline, recent failures,
performance per worker service, proxies that cause trouble."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Float, String, and_, case, cast, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.models import Event, Mission, Proxy, WorkerService
from forager.missions.states import MISSION_ENTITY, WORKER_ENTITY
from forager.missions.states import MissionEvent as E


async def timeline(session: AsyncSession, mission: Mission) -> list[Event]:
    """The mission's events, and the session events of its service that name it, in order."""
    own = and_(Event.entity_type == MISSION_ENTITY, Event.entity_id == str(mission.id))
    named = and_(
        Event.entity_type == WORKER_ENTITY,
        Event.entity_id == str(mission.worker_id),
        Event.details["mission_id"].as_integer() == mission.id,
    )
    where = or_(own, named) if mission.worker_id is not None else own
    rows = await session.scalars(select(Event).where(where).order_by(Event.created_at, Event.id))
    return list(rows)


@dataclass(frozen=True, slots=True)
class FailureRow:
    id: int
    status: str
    error_code: str | None
    error_message: str | None
    retry_count: int
    failed_at: datetime
    details: dict[str, object] | None


async def failures(session: AsyncSession, since: datetime, limit: int) -> list[FailureRow]:
    """Missions that failed since ``since``, newest first."""
    rows = await session.execute(
        select(Mission, Event.created_at, Event.details)
        .join(
            Event,
            and_(
                Event.entity_type == MISSION_ENTITY,
                Event.entity_id == cast(Mission.id, String),
                Event.event == E.MISSION_FAILED,
            ),
        )
        .where(Event.created_at >= since)
        .order_by(Event.created_at.desc(), Event.id.desc())
        .limit(limit)
    )
    return [
        FailureRow(m.id, m.status, m.error_code, m.error_message, m.retry_count, at, details)
        for m, at, details in rows
    ]


@dataclass(frozen=True, slots=True)
class WorkerPerformance:
    worker_id: int
    worker_name: str
    completed_count: int
    failed_count: int
    avg_duration_ms: float | None


async def worker_performance(session: AsyncSession, since: datetime) -> list[WorkerPerformance]:
    """Scrapes completed and failed per worker service since ``since``, mean duration."""
    completed = Event.event == E.SCRAPE_COMPLETED
    duration = cast(Event.details["duration_ms"].as_float(), Float)
    rows = await session.execute(
        select(
            WorkerService.id,
            WorkerService.name,
            func.count(case((completed, 1))),
            func.count(case((Event.event == E.SCRAPE_FAILED, 1))),
            func.avg(case((completed, duration))),
        )
        .join(Mission, Mission.worker_id == WorkerService.id)
        .join(
            Event,
            and_(Event.entity_type == MISSION_ENTITY, Event.entity_id == cast(Mission.id, String)),
        )
        .where(Event.event.in_([E.SCRAPE_COMPLETED, E.SCRAPE_FAILED]), Event.created_at >= since)
        .group_by(WorkerService.id, WorkerService.name)
        .order_by(WorkerService.id)
    )
    return [
        WorkerPerformance(i, n, c, f, None if avg is None else round(float(avg), 1))
        for i, n, c, f, avg in rows
    ]


@dataclass(frozen=True, slots=True)
class ProxyTrouble:
    proxy_id: int
    name: str
    host: str
    failure_count: int
    is_active: bool
    session_failures: int
    rotations: int


async def proxy_trouble(session: AsyncSession, since: datetime) -> list[ProxyTrouble]:
    """Each proxy's session failures and rotations away from it since ``since``."""
    label = func.coalesce(Proxy.name, Proxy.proxy_url + ":" + cast(Proxy.proxy_port, String))
    named = or_(
        and_(
            Event.event == E.SESSION_FAILED,
            Event.details["proxy_name"].as_string() == label,
        ),
        and_(
            Event.event == E.PROXY_ROTATED,
            Event.details["old_proxy"].as_string() == label,
        ),
    )
    rows = await session.execute(
        select(
            Proxy.id,
            label,
            Proxy.proxy_url,
            Proxy.failure_count,
            Proxy.is_active,
            func.count(case((Event.event == E.SESSION_FAILED, 1))),
            func.count(case((Event.event == E.PROXY_ROTATED, 1))),
        )
        .outerjoin(
            Event,
            and_(
                Event.entity_type == WORKER_ENTITY,
                Event.created_at >= since,
                named,
            ),
        )
        .group_by(Proxy.id, label, Proxy.proxy_url, Proxy.failure_count, Proxy.is_active)
        .order_by(Proxy.failure_count.desc(), Proxy.id)
    )
    return [ProxyTrouble(*row) for row in rows]
