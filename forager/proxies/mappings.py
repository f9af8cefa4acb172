"""Domain ↔ proxy mappings: assigning the operator's proxies to a domain, listing them with
their counters, enabling or disabling one for a domain, removing it.

A mapping an operator made has ``source = 'admin'``; the selection (``proxies.selection``)
creates ``source = 'pool'`` rows for global-pool proxies a domain used, and assigning such a
proxy adopts its row (counters kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db import audit
from forager.db.dialect import insert_ignoring_conflicts
from forager.db.engine import Database
from forager.db.models import Domain, DomainProxy, Proxy
from forager.db.queries import get_or_not_found
from forager.db.types import utcnow
from forager.errors import NotFound
from forager.proxies.health import rate


async def _domain(session: AsyncSession, domain_id: int) -> Domain:
    return await get_or_not_found(session, Domain, domain_id, f"domain {domain_id} does not exist")


@dataclass(frozen=True, slots=True)
class Assignment:
    assigned: list[int]
    already: list[int]
    unknown: list[int]


async def assign_proxies(
    db: Database, domain_id: int, proxy_ids: Sequence[int], priority: int
) -> Assignment:
    """Map proxies to a domain; pairs that exist are left as they are (seed: DO NOTHING)."""
    wanted = list(dict.fromkeys(proxy_ids))
    async with db.session() as session:
        await _domain(session, domain_id)
        known = set(await session.scalars(select(Proxy.id).where(Proxy.id.in_(wanted))))
        rows = [
            {"domain_id": domain_id, "proxy_id": p, "priority": priority}
            for p in wanted
            if p in known
        ]
        inserted: set[int] = set()
        if rows:
            insert = insert_ignoring_conflicts(
                session, DomainProxy.__table__, on=["domain_id", "proxy_id"]
            )
            inserted = set(await session.scalars(insert.returning(DomainProxy.proxy_id), rows))
            # A pair the global pool created becomes an operator's mapping (counters kept).
            adopted = await session.scalars(
                update(DomainProxy)
                .where(
                    DomainProxy.domain_id == domain_id,
                    DomainProxy.proxy_id.in_([r["proxy_id"] for r in rows]),
                    DomainProxy.source == "pool",
                )
                .values(source="admin", priority=priority)
                .returning(DomainProxy.proxy_id)
            )
            inserted |= set(adopted)
        assigned = [p for p in wanted if p in inserted]
        if assigned:
            details = {"proxy_ids": assigned, "priority": priority}
            audit.record(session, "domain", [domain_id], "proxies_assigned", details)
    return Assignment(
        assigned=assigned,
        already=[p for p in wanted if p in known and p not in inserted],
        unknown=[p for p in wanted if p not in known],
    )


async def remove_mapping(db: Database, domain_id: int, proxy_id: int) -> None:
    """Stop using a proxy for a domain."""
    async with db.session() as session:
        await _domain(session, domain_id)
        removed = await session.scalar(
            delete(DomainProxy)
            .where(DomainProxy.domain_id == domain_id, DomainProxy.proxy_id == proxy_id)
            .returning(DomainProxy.id)
        )
        if removed is None:
            raise NotFound(f"proxy {proxy_id} is not mapped to domain {domain_id}")
        audit.record(session, "domain", [domain_id], "proxy_removed", {"proxy_id": proxy_id})


@dataclass(frozen=True, slots=True)
class MappingView:
    """A domain's mapping with its counters and the proxy it points to."""

    domain_id: int
    proxy_id: int
    priority: int
    is_active: bool
    success_count: int
    failure_count: int
    success_rate_percent: float | None
    avg_response_time_ms: int | None
    last_used_at: Any
    proxy_url: str
    proxy_port: int
    proxy_protocol: str
    proxy_is_active: bool
    country_code: str | None
    source: str = "admin"  # admin | pool (created when the domain used a global-pool proxy)


async def _mappings(
    session: AsyncSession, domain_id: int, proxy_id: int | None = None
) -> list[MappingView]:
    query = (
        select(DomainProxy, Proxy)
        .join(Proxy, Proxy.id == DomainProxy.proxy_id)
        .where(DomainProxy.domain_id == domain_id)
        .order_by(
            DomainProxy.priority, DomainProxy.last_used_at.asc().nulls_first(), DomainProxy.id
        )
    )
    if proxy_id is not None:
        query = query.where(DomainProxy.proxy_id == proxy_id)
    return [
        MappingView(
            domain_id=m.domain_id,
            proxy_id=m.proxy_id,
            priority=m.priority,
            is_active=m.is_active,
            success_count=m.success_count,
            failure_count=m.failure_count,
            success_rate_percent=rate(m.success_count, m.success_count + m.failure_count),
            avg_response_time_ms=m.avg_response_time_ms,
            last_used_at=m.last_used_at,
            proxy_url=p.proxy_url,
            proxy_port=p.proxy_port,
            proxy_protocol=p.proxy_protocol,
            proxy_is_active=p.is_active,
            country_code=p.country_code,
            source=m.source,
        )
        for m, p in await session.execute(query)
    ]


async def domain_proxies(session: AsyncSession, domain_id: int) -> list[MappingView]:
    """A domain's proxies, by priority then least recently used (seed query 3)."""
    await _domain(session, domain_id)
    return await _mappings(session, domain_id)


async def set_mapping_active(
    db: Database, domain_id: int, proxy_id: int, *, active: bool
) -> MappingView:
    """Enable (resetting the mapping's ``failure_count``) or disable a proxy for one domain."""
    async with db.session() as session:
        await _domain(session, domain_id)
        values: dict[str, Any] = {"is_active": active, "updated_at": utcnow()}
        if active:
            values["failure_count"] = 0
        changed = await session.scalar(
            update(DomainProxy)
            .where(DomainProxy.domain_id == domain_id, DomainProxy.proxy_id == proxy_id)
            .values(**values)
            .returning(DomainProxy.id)
        )
        if changed is None:
            raise NotFound(f"proxy {proxy_id} is not mapped to domain {domain_id}")
        event = "proxy_mapping_enabled" if active else "proxy_mapping_disabled"
        audit.record(session, "domain", [domain_id], event, {"proxy_id": proxy_id})
        [view] = await _mappings(session, domain_id, proxy_id)
    return view
