"""Proxy pool administration: CRUD, enable/disable, test fetches, mappings, stats and health.

Passwords arrive in plain text, are encrypted here with ``SecretBox`` and leave only as
ciphertext in the ``proxies`` row; nothing in this module returns or records them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from sqlalchemy import case, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import audit
from forager.db.dialect import insert_ignoring_conflicts
from forager.db.engine import Database
from forager.db.models import Domain, DomainProxy, Proxy
from forager.db.types import utcnow
from forager.errors import Conflict, FetchError, NotFound
from forager.fetch.base import FetchRequest
from forager.fetch.http import HttpFetcher
from forager.fetch.proxies import (
    MAPPING_FAILURE_LIMIT,
    PROXY_FAULTS,
    proxy_url,
    record_proxy_health,
)

PROTOCOLS = ("http", "https", "socks5")
MIN_ACTIVE_PROXIES = 3  # seed alert 1: fewer active proxies than this for an active domain
MAX_FAILURE_RATE_PERCENT = 10.0  # seed alert 2: a domain's proxies fail more often than this


# -- bulk lines ------------------------------------------------------------------------------


def parse_proxy_line(line: str) -> dict[str, Any]:
    """``scheme://user:pass@host:port`` (scheme defaults to http) as proxy column values."""
    text = line.strip()
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError("the port must be a number from 1 to 65535") from exc
    if parts.scheme not in PROTOCOLS:
        raise ValueError(f"the protocol must be one of {', '.join(PROTOCOLS)}")
    if not parts.hostname:
        raise ValueError("no host")
    if port is None:
        raise ValueError("no port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("a proxy line has no path, query or fragment")
    return {
        "proxy_protocol": parts.scheme,
        "proxy_url": parts.hostname,
        "proxy_port": port,
        "proxy_username": unquote(parts.username) if parts.username else None,
        "proxy_password": unquote(parts.password) if parts.password else None,
    }


def masked_line(line: str) -> str:
    """``line`` with the password part of its userinfo replaced by ``***``."""
    head, at, tail = line.strip().rpartition("@")
    if not at:
        return line.strip()
    scheme, sep, userinfo = head.rpartition("://")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{tail}"


# -- proxies ---------------------------------------------------------------------------------


async def get_proxy(session: AsyncSession, proxy_id: int) -> Proxy:
    proxy = await session.get(Proxy, proxy_id)
    if proxy is None:
        raise NotFound(f"proxy {proxy_id} does not exist")
    return proxy


async def _same_proxy(
    session: AsyncSession, host: str, port: int, username: str | None, *, other_than: int = 0
) -> int | None:
    """The id of the proxy with this host, port and username, if any (besides ``other_than``)."""
    user = Proxy.proxy_username.is_(None) if username is None else Proxy.proxy_username == username
    found: int | None = await session.scalar(
        select(Proxy.id)
        .where(Proxy.proxy_url == host, Proxy.proxy_port == port, user, Proxy.id != other_than)
        .limit(1)
    )
    return found


def _encrypting(values: dict[str, Any], box: SecretBox) -> dict[str, Any]:
    """``values`` with ``proxy_password`` encrypted (an empty one clears it)."""
    if "proxy_password" not in values:
        return values
    plain = values["proxy_password"]
    return {**values, "proxy_password": box.encrypt(plain) if plain else None}


def _described(proxy: Proxy) -> dict[str, Any]:
    return {"proxy": f"{proxy.proxy_protocol}://{proxy.proxy_url}:{proxy.proxy_port}"}


async def create_proxies(
    db: Database, box: SecretBox, items: Sequence[dict[str, Any]]
) -> list[tuple[Literal["created", "duplicate"], int]]:
    """Insert proxies (validated column values); a known host+port+username is a duplicate."""
    results: list[tuple[Literal["created", "duplicate"], int]] = []
    async with db.session() as session:
        for values in items:
            same = await _same_proxy(
                session, values["proxy_url"], values["proxy_port"], values.get("proxy_username")
            )
            if same is not None:
                results.append(("duplicate", same))
                continue
            proxy = Proxy(**_encrypting(values, box))
            session.add(proxy)
            await session.flush()
            audit.record(session, "proxy", [proxy.id], "created", _described(proxy))
            results.append(("created", proxy.id))
    return results


async def create_proxy(db: Database, box: SecretBox, values: dict[str, Any]) -> Proxy:
    """Insert one proxy; ``Conflict`` when the same host+port+username exists."""
    [(result, proxy_id)] = await create_proxies(db, box, [values])
    if result == "duplicate":
        raise Conflict(f"proxy {proxy_id} has the same host, port and username")
    async with db.reader() as session:
        return await get_proxy(session, proxy_id)


async def update_proxy(
    db: Database, box: SecretBox, proxy_id: int, changes: dict[str, Any]
) -> Proxy:
    """Apply ``changes`` (a new password is encrypted; an empty one clears it)."""
    async with db.session() as session:
        proxy = await get_proxy(session, proxy_id)
        for name, value in _encrypting(changes, box).items():
            setattr(proxy, name, value)
        same = await _same_proxy(
            session, proxy.proxy_url, proxy.proxy_port, proxy.proxy_username, other_than=proxy.id
        )
        if same is not None:
            raise Conflict(f"proxy {same} has the same host, port and username")
        if changes:
            audit.record(session, "proxy", [proxy_id], "updated", {"fields": sorted(changes)})
        await session.flush()
    return proxy


async def delete_proxy(db: Database, proxy_id: int) -> None:
    """Delete a proxy; its domain mappings go with it (ON DELETE CASCADE)."""
    async with db.session() as session:
        proxy = await get_proxy(session, proxy_id)
        audit.record(session, "proxy", [proxy_id], "deleted", _described(proxy))
        await session.execute(delete(Proxy).where(Proxy.id == proxy_id))


async def set_proxy_active(db: Database, proxy_id: int, *, active: bool) -> Proxy:
    """Enable (resetting ``failure_count``, seed 004) or disable a proxy everywhere."""
    async with db.session() as session:
        proxy = await get_proxy(session, proxy_id)
        proxy.is_active = active
        proxy.retest_at = None  # the operator decided: no background re-test either way
        proxy.retest_count = 0
        if active:
            proxy.failure_count = 0
        audit.record(session, "proxy", [proxy_id], "enabled" if active else "disabled")
        await session.flush()
    return proxy


def disabled_reason(proxy: Proxy) -> str | None:
    """Why a proxy is out of rotation, from what is stored; ``None`` while it is enabled.

    Health disabling (``FORAGER_PROXY_FAILURE_LIMIT`` consecutive failures) is the only
    path that sets ``retest_at``; an operator's enable or disable clears it.
    """
    if proxy.is_active:
        return None
    if proxy.retest_at is None:
        return "disabled by an operator"
    retests = proxy.retest_count
    failed = f", then {retests} failed re-test{'s' if retests != 1 else ''}" if retests else ""
    when = proxy.retest_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"failed {proxy.failure_count} times in a row{failed}; re-test at {when}"


# -- test fetch ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ok: bool
    status_code: int | None = None
    response_time_ms: int | None = None
    error_type: str | None = None
    error: str | None = None


async def _probe(settings: Settings, via: str, url: str) -> ProbeResult:
    fetcher = HttpFetcher(settings)
    try:
        response = await fetcher.fetch(FetchRequest(url, settings.user_agent, via))
    except FetchError as exc:
        return ProbeResult(False, exc.status_code, None, exc.error_type, exc.message)
    finally:
        await fetcher.aclose()
    return ProbeResult(True, response.status_code, response.elapsed_ms)


async def probe_proxy(
    db: Database, settings: Settings, box: SecretBox, proxy_id: int, url: str
) -> ProbeResult:
    """Fetch ``url`` through the proxy and count the outcome on the proxy's health."""
    async with db.reader() as session:
        via = proxy_url(await get_proxy(session, proxy_id), box)
    probe = await _probe(settings, via, url)
    async with db.session() as session:
        await get_proxy(session, proxy_id)  # deleted meanwhile: 404 rather than a silent no-op
        await record_proxy_health(
            session,
            proxy_id,
            ok=probe.ok or probe.error_type not in PROXY_FAULTS,
            response_ms=probe.response_time_ms,
            settings=settings,
        )
        details = {"url": url, "ok": probe.ok, "error_type": probe.error_type}
        audit.record(session, "proxy", [proxy_id], "tested", details)
    return probe


# -- statistics ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupCount:
    value: str | None
    total: int
    active: int


@dataclass(frozen=True, slots=True)
class ProxyStats:
    total: int
    active: int
    disabled: int
    avg_response_time_ms: float | None
    by_country: list[GroupCount]
    by_provider: list[GroupCount]


def _mean(value: Any) -> float | None:
    return None if value is None else round(float(value), 1)


async def proxy_stats(session: AsyncSession) -> ProxyStats:
    """Counts of the whole pool, by country and by provider, and the mean response time."""
    active = func.count(case((Proxy.is_active.is_(True), 1)))
    total, active_total, avg_ms = (
        await session.execute(
            select(func.count(), active, func.avg(Proxy.avg_response_time_ms)).select_from(Proxy)
        )
    ).one()

    async def grouped(column: Any) -> list[GroupCount]:
        rows = await session.execute(
            select(column, func.count(), active).group_by(column).order_by(column.nulls_last())
        )
        return [GroupCount(value, n, up) for value, n, up in rows]

    return ProxyStats(
        total=total,
        active=active_total,
        disabled=total - active_total,
        avg_response_time_ms=_mean(avg_ms),
        by_country=await grouped(Proxy.country_code),
        by_provider=await grouped(Proxy.provider),
    )


# -- domain mappings -------------------------------------------------------------------------


async def _domain(session: AsyncSession, domain_id: int) -> Domain:
    domain = await session.get(Domain, domain_id)
    if domain is None:
        raise NotFound(f"domain {domain_id} does not exist")
    return domain


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


def _rate(part: int, whole: int) -> float | None:
    return round(part * 100 / whole, 2) if whole else None


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
            success_rate_percent=_rate(m.success_count, m.success_count + m.failure_count),
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


# -- health and alerts -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DomainHealth:
    """One row of the seed's "Proxy Health per Domain" dashboard query."""

    domain_id: int
    domain_name: str
    domain_is_active: bool
    total_proxies: int
    active_proxies: int
    failing_proxies: int
    avg_response_time_ms: float | None
    total_success: int
    total_failures: int
    failure_rate_percent: float | None


@dataclass(frozen=True, slots=True)
class Alert:
    kind: Literal["low_active_proxies", "high_failure_rate"]
    domain_id: int
    domain_name: str
    message: str


def _alerts(row: DomainHealth) -> list[Alert]:
    alerts: list[Alert] = []
    # The seed's query drops domains without any active mapping (its WHERE turns the LEFT
    # JOIN into an inner one); a domain whose every mapping is disabled is reported too.
    if row.domain_is_active and row.total_proxies and row.active_proxies < MIN_ACTIVE_PROXIES:
        message = f"{row.active_proxies} active proxies (fewer than {MIN_ACTIVE_PROXIES})"
        alerts.append(Alert("low_active_proxies", row.domain_id, row.domain_name, message))
    rate = row.failure_rate_percent
    if rate is not None and rate > MAX_FAILURE_RATE_PERCENT:
        message = f"proxy failure rate {rate:g} % (over {MAX_FAILURE_RATE_PERCENT:g} %)"
        alerts.append(Alert("high_failure_rate", row.domain_id, row.domain_name, message))
    return alerts


async def proxy_health(session: AsyncSession) -> tuple[list[DomainHealth], list[Alert]]:
    """Every domain's proxy pool health (seed dashboard query) and the seed's two alerts."""
    rows = await session.execute(
        select(
            Domain.id,
            Domain.domain_name,
            Domain.is_active,
            func.count(DomainProxy.id),
            func.count(case((DomainProxy.is_active.is_(True), 1))),
            func.count(case((DomainProxy.failure_count >= MAPPING_FAILURE_LIMIT, 1))),
            func.avg(DomainProxy.avg_response_time_ms),
            func.coalesce(func.sum(DomainProxy.success_count), 0),
            func.coalesce(func.sum(DomainProxy.failure_count), 0),
        )
        .outerjoin(DomainProxy, DomainProxy.domain_id == Domain.id)
        .group_by(Domain.id, Domain.domain_name, Domain.is_active)
        .order_by(Domain.domain_name)
    )
    domains = [
        DomainHealth(
            domain_id=d_id,
            domain_name=name,
            domain_is_active=d_active,
            total_proxies=total,
            active_proxies=active,
            failing_proxies=failing,
            avg_response_time_ms=_mean(avg_ms),
            total_success=int(ok),
            total_failures=int(failed),
            failure_rate_percent=_rate(int(failed), int(ok) + int(failed)),
        )
        for d_id, name, d_active, total, active, failing, avg_ms, ok, failed in rows
    ]
    return domains, [alert for row in domains for alert in _alerts(row)]
