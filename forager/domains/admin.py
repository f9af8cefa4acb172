"""Domain administration: create, list, update, delete, (de)activate, robots.txt, statistics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlTask, Domain, Product
from forager.db.queries import get_or_not_found, page
from forager.db.types import utcnow
from forager.domains import escalation, profile, robots, sticky_sessions
from forager.errors import Conflict
from forager.parse.registry import parser_name_for_host
from forager.queue import door
from forager.queue.lifecycle import LEASED, TaskStatus

STATS_WINDOW = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class Filters:
    """List filters; ``None`` means "any"."""

    is_active: bool | None = None
    parser_name: str | None = None
    q: str | None = None


@dataclass(frozen=True, slots=True)
class Stats:
    """What ``stats`` reports about one domain."""

    domain_id: int
    tasks_by_status: dict[str, int]
    attempts_by_outcome: dict[str, int]
    attempts_by_error_type: dict[str, int]
    avg_fetch_response_time_ms: float | None
    products: int
    last_completed_at: datetime | None


async def _get(session: AsyncSession, domain_id: int, *, lock: bool = False) -> Domain:
    missing = f"domain {domain_id} does not exist"
    return await get_or_not_found(
        session, Domain, domain_id, missing, populate_existing=True, with_for_update=lock
    )


async def get(session: AsyncSession, domain_id: int) -> Domain:
    """The domain ``domain_id``, or ``NotFound``."""
    return await _get(session, domain_id)


async def task_counts(session: AsyncSession, ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """Tasks by status for each domain in ``ids`` (every status present), in one query."""
    counts = {i: dict.fromkeys(map(str, TaskStatus), 0) for i in ids}
    if ids:
        rows = await session.execute(
            select(CrawlTask.domain_id, CrawlTask.status, func.count())
            .where(CrawlTask.domain_id.in_(list(ids)))
            .group_by(CrawlTask.domain_id, CrawlTask.status)
        )
        for domain_id, status, count in rows:
            counts[domain_id][status] = count
    return counts


async def list_page(
    session: AsyncSession, filters: Filters, *, limit: int, offset: int
) -> tuple[list[Domain], int]:
    """One page of domains ordered by name, and how many match in all."""
    query = select(Domain)
    if filters.is_active is not None:
        query = query.where(Domain.is_active == filters.is_active)
    if filters.parser_name is not None:
        query = query.where(Domain.parser_name == filters.parser_name)
    if filters.q:
        query = query.where(Domain.domain_name.contains(filters.q.lower(), autoescape=True))
    return await page(session, query, Domain.domain_name, Domain.id, limit=limit, offset=offset)


def _defaults(settings: Settings, domain_name: str) -> dict[str, Any]:
    return {
        "base_url": f"https://{domain_name}",
        "parser_name": parser_name_for_host(domain_name),
        "crawl_delay_seconds": settings.default_crawl_delay_seconds,
        "max_concurrent_requests": settings.default_max_concurrent_requests,
        "default_crawl_frequency_seconds": settings.default_crawl_frequency_seconds,
        "user_agent": settings.user_agent,
        "is_active": True,
    }


def _sealed(values: dict[str, Any], box: SecretBox | None, stored: Any) -> dict[str, Any]:
    """``values`` with a given request profile in its stored form (secret values encrypted)."""
    if "request_profile" not in values:
        return values
    if box is None:
        raise ValueError("a request profile is stored through the secret box")
    sealed = profile.seal(values["request_profile"], box, stored, "request_profile")
    return {**values, "request_profile": sealed or None}


def _sessions(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with a given sticky session policy in its stored form (None: off)."""
    if "sticky_sessions" not in values:
        return values
    return {**values, "sticky_sessions": sticky_sessions.stored(values["sticky_sessions"])}


async def create(
    db: Database,
    settings: Settings,
    domain_name: str,
    values: dict[str, Any],
    box: SecretBox | None = None,
) -> Domain:
    """A new domain; settings not in ``values`` get the defaults. ``Conflict`` if it exists."""
    duplicate = Conflict(f"domain {domain_name!r} already exists")
    values = _sessions(_sealed(values, box, None))
    try:
        async with db.session() as session:
            if await session.scalar(select(Domain.id).where(Domain.domain_name == domain_name)):
                raise duplicate
            domain = Domain(
                domain_name=domain_name, **{**_defaults(settings, domain_name), **values}
            )
            session.add(domain)
            await session.flush()
            audit.record(session, "domain", [domain.id], "created", {"by": "api"})
    except IntegrityError as exc:  # created concurrently between the check and the insert
        raise duplicate from exc
    return domain


async def update(
    db: Database, domain_id: int, values: dict[str, Any], box: SecretBox | None = None
) -> Domain:
    """Set the given fields; the event names those whose value changed (never a value)."""
    async with db.session() as session:
        domain = await _get(session, domain_id, lock=True)
        values = _sessions(_sealed(values, box, domain.request_profile))
        changed = sorted(k for k, v in values.items() if getattr(domain, k) != v)
        for key in changed:
            setattr(domain, key, values[key])
        if "fetcher" in changed:
            escalation.forget(domain)
        if changed:
            await session.flush()
            audit.record(session, "domain", [domain_id], "updated", {"fields": changed})
        return await _get(session, domain_id)


async def set_active(db: Database, domain_id: int, active: bool) -> Domain:
    """Activate or deactivate; an event is written only when the flag changes."""
    async with db.session() as session:
        domain = await _get(session, domain_id, lock=True)
        if domain.is_active != active:
            domain.is_active = active
            await session.flush()
            event = "activated" if active else "deactivated"
            audit.record(session, "domain", [domain_id], event, {"by": "api"})
        return await _get(session, domain_id)


def _in_flight(domain_id: int, leased: int) -> Conflict:
    return Conflict(
        f"domain {domain_id} has {leased} task(s) in flight "
        f"({', '.join(LEASED)}); pause or cancel them, or wait, then delete again"
    )


async def _count_tasks(session: AsyncSession, domain_id: int, *where: Any) -> int:
    query = select(func.count()).select_from(CrawlTask).where(CrawlTask.domain_id == domain_id)
    return await session.scalar(query.where(*where)) or 0


async def remove(db: Database, domain_id: int) -> None:
    """Delete a domain with its tasks, attempts and products; ``Conflict`` while tasks are leased.

    The domain row is locked first, so no claim takes one of its tasks meanwhile; tasks are
    deleted only when not leased, and any left over (leased since) refuse the whole delete.
    """
    async with db.session() as session:
        domain = await _get(session, domain_id, lock=True)
        if leased := await _count_tasks(session, domain_id, CrawlTask.status.in_(LEASED)):
            raise _in_flight(domain_id, leased)
        tasks = await _count_tasks(session, domain_id)
        if left := await door.delete_domain_tasks(session, domain_id):
            raise _in_flight(domain_id, left)  # rolls the deletes back
        await session.delete(domain)
        await session.flush()
        details = {"by": "api", "domain_name": domain.domain_name, "tasks": tasks}
        audit.record(session, "domain", [domain_id], "deleted", details)


# -- robots.txt: all of it lives in forager.domains.robots; the API's refresh goes through here.

refresh_robots = robots.refresh_robots


# -- statistics -------------------------------------------------------------------------


async def _grouped(session: AsyncSession, column: Any, *where: Any) -> dict[str, int]:
    rows = await session.execute(
        select(column, func.count())
        .select_from(CrawlAttempt)
        .join(CrawlTask, CrawlTask.id == CrawlAttempt.task_id)
        .where(*where)
        .group_by(column)
    )
    return {str(key): count for key, count in rows if key is not None}


async def stats(session: AsyncSession, domain_id: int) -> Stats:
    """Tasks by status, the last 24 hours of attempts, products and the last completion."""
    await _get(session, domain_id)
    recent = (CrawlTask.domain_id == domain_id, CrawlAttempt.started_at >= utcnow() - STATS_WINDOW)
    avg_ms = await session.scalar(
        select(func.avg(CrawlAttempt.response_time_ms))
        .join(CrawlTask, CrawlTask.id == CrawlAttempt.task_id)
        .where(*recent, CrawlAttempt.phase == "fetch", CrawlAttempt.outcome == "success")
    )
    products = await session.scalar(
        select(func.count()).select_from(Product).where(Product.domain_id == domain_id)
    )
    last_completed = await session.scalar(
        select(func.max(CrawlTask.completed_at)).where(CrawlTask.domain_id == domain_id)
    )
    return Stats(
        domain_id=domain_id,
        tasks_by_status=(await task_counts(session, [domain_id]))[domain_id],
        attempts_by_outcome=await _grouped(session, CrawlAttempt.outcome, *recent),
        attempts_by_error_type=await _grouped(session, CrawlAttempt.error_type, *recent),
        avg_fetch_response_time_ms=None if avg_ms is None else round(float(avg_ms), 1),
        products=products or 0,
        last_completed_at=last_completed,
    )
