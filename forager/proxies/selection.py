"""Proxy selection for a domain (``lru``, ``random``, ``exclusive`` leases) and lease release.

Selection is one locked ``SELECT … FOR UPDATE SKIP LOCKED`` plus its updates, inside the
caller's transaction: two workers never pick the same LRU head at once, and an exclusive
lease is a compare-and-set on ``proxies.lease_owner``, so two processes never hold the same
exclusive proxy. Candidates are the domain's mapped proxies (``source = 'admin'``); a domain
with none uses the global pool when ``use_global_pool`` is set (or a country is required),
else it goes direct. Disabled proxies and mappings, open breakers, other countries, leased
proxies (``exclusive``), pairs inside their (domain, proxy) rate limit and proxies that used
up their ``max_requests_per_hour`` are skipped. The hourly budget is a window in the proxy's
row (``hour_started_at``, ``hour_requests``), counted under the selection's row lock, so every
process shares it: at most ``max_requests_per_hour`` picks per window, and the window starts
again with the first pick an hour or more after it began.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import breakers
from forager.db.dialect import insert_ignoring_conflicts
from forager.db.models import Domain, DomainProxy, Proxy
from forager.db.types import utcnow
from forager.errors import ForagerError

STRATEGIES = ("lru", "random", "exclusive")
HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class ProxyChoice:
    proxy_id: int
    url: str  # with credentials: keep in memory, never log or store
    lease_owner: str | None = None  # set when the proxy is leased exclusively

    @property
    def display(self) -> str:
        """The proxy without credentials, safe for logs."""
        scheme, _, rest = self.url.partition("://")
        return f"{scheme}://{rest.rpartition('@')[2]}"


@dataclass(frozen=True, slots=True)
class DomainPolicy:
    """What a domain says about proxies."""

    domain_id: int
    strategy: str = "lru"
    use_global_pool: bool = False
    required_country_code: str | None = None
    rate_limit_rps: float | None = None

    @classmethod
    def of(cls, domain: Domain) -> DomainPolicy:
        return cls(
            domain.id,
            domain.proxy_strategy,
            domain.use_global_pool,
            domain.required_country_code,
            domain.proxy_rate_limit_rps,
        )


class NoProxyAvailable(ForagerError):
    """The domain needs a proxy but none may be used now.

    ``retry_in`` is how long until one may be free (leases, rate limits, breakers);
    ``None`` when no proxy could serve the domain at all (none mapped / none in the country).
    """

    def __init__(self, message: str, retry_in: float | None) -> None:
        super().__init__(message)
        self.retry_in = retry_in


def proxy_url(proxy: Proxy, box: SecretBox | None) -> str:
    auth = ""
    if proxy.proxy_username:
        password = box.decrypt(proxy.proxy_password) if proxy.proxy_password and box else ""
        auth = f"{quote(proxy.proxy_username, safe='')}:{quote(password, safe='')}@"
    return f"{proxy.proxy_protocol}://{auth}{proxy.proxy_url}:{proxy.proxy_port}"


def _usable(policy: DomainPolicy, limit: int) -> list[Any]:
    """Conditions that hold whatever the moment: enabled, right country, mapping healthy."""
    conditions: list[Any] = [
        Proxy.is_active.is_(True),
        Proxy.in_use_by_worker_id.is_(None),  # held by a worker service's session (missions)
        or_(
            DomainProxy.id.is_(None),
            and_(DomainProxy.is_active.is_(True), DomainProxy.failure_count < limit),
        ),
    ]
    if policy.required_country_code:
        conditions.append(Proxy.country_code == policy.required_country_code.upper())
    return conditions


def _new_hour(now: datetime) -> Any:
    """The proxy's hourly window is over (or never started): its budget is whole again."""
    return or_(Proxy.hour_started_at.is_(None), Proxy.hour_started_at <= now - HOUR)


def _within_hourly_budget(now: datetime) -> Any:
    return or_(_new_hour(now), Proxy.hour_requests < Proxy.max_requests_per_hour)


def _free_now(policy: DomainPolicy, settings: Settings, now: datetime) -> list[Any]:
    """Conditions that change with time: breaker, rates (pair, hourly), exclusive lease."""
    conditions = [
        breakers.allows(Proxy, settings, now),
        or_(DomainProxy.next_request_at.is_(None), DomainProxy.next_request_at <= now),
        _within_hourly_budget(now),
    ]
    if policy.strategy == "exclusive":
        conditions.append(or_(Proxy.lease_owner.is_(None), Proxy.lease_expires_at < now))
    return conditions


def _order(policy: DomainPolicy, pool: bool) -> list[Any]:
    if policy.strategy == "random":
        return [func.random()]
    if policy.strategy == "exclusive":  # leases are global: the proxy's own LRU
        return [Proxy.last_used_at.asc().nulls_first(), Proxy.id]
    # Mapped proxies rank by the operator's priority first; pool proxies have none.
    return [
        *([] if pool else [DomainProxy.priority]),
        DomainProxy.last_used_at.asc().nulls_first(),
        Proxy.last_used_at.asc().nulls_first(),
        Proxy.id,
    ]


async def choose_proxy(
    session: AsyncSession,
    policy: DomainPolicy,
    settings: Settings,
    box: SecretBox | None,
    *,
    owner: str,
    avoid: frozenset[int] = frozenset(),
) -> ProxyChoice | None:
    """Pick (and for ``exclusive``, lease to ``owner``) a proxy; ``None`` means go direct.

    ``avoid`` names proxies not to use if any other will do (the one a ban came through).
    Raises ``NoProxyAvailable`` when the domain needs a proxy and none may be used now.
    """
    now = utcnow()
    mapped = await session.scalar(
        select(DomainProxy.id)
        .where(DomainProxy.domain_id == policy.domain_id, DomainProxy.source == "admin")
        .limit(1)
    )
    pool = mapped is None
    if pool and not (policy.use_global_pool or policy.required_country_code):
        return None
    on = and_(DomainProxy.proxy_id == Proxy.id, DomainProxy.domain_id == policy.domain_id)
    if pool:
        base = select(Proxy, DomainProxy).outerjoin(DomainProxy, on)
    else:
        base = select(Proxy, DomainProxy).join(DomainProxy, and_(on, DomainProxy.source == "admin"))
    usable = base.where(*_usable(policy, settings.mapping_failure_limit))
    query = usable.where(*_free_now(policy, settings, now))
    for excluded in (avoid, frozenset()) if avoid else (frozenset(),):
        picked = query.where(Proxy.id.not_in(excluded)) if excluded else query
        row = (
            await session.execute(
                picked.order_by(*_order(policy, pool))
                .limit(1)
                .with_for_update(of=Proxy, skip_locked=True)
            )
        ).one_or_none()
        if row is not None:
            proxy, mapping = row
            if await _take(session, policy, settings, proxy, mapping, owner, now):
                lease = owner if policy.strategy == "exclusive" else None
                return ProxyChoice(proxy.id, proxy_url(proxy, box), lease)
    raise await _unavailable(session, policy, usable, now)


async def _take(
    session: AsyncSession,
    policy: DomainPolicy,
    settings: Settings,
    proxy: Proxy,
    mapping: DomainProxy | None,
    owner: str,
    now: datetime,
) -> bool:
    """Mark the pick used (and leased), counting it in the proxy's hour; False if the pair's
    rate, an exclusive lease or the hourly budget was taken meanwhile.

    The pick's query locked the proxy only. On PostgreSQL (READ COMMITTED) it rechecks only
    the locked row against another pick that committed meanwhile, and may have read the
    pair's ``next_request_at`` from before it: so the pair's row is locked (proxy first, then
    mapping, as everywhere) and its time read again here, before anything is written."""
    this_pair = (DomainProxy.domain_id == policy.domain_id, DomainProxy.proxy_id == proxy.id)
    if policy.rate_limit_rps or (mapping is not None and mapping.next_request_at is not None):
        waits_until = await session.scalar(
            select(DomainProxy.next_request_at).where(*this_pair).with_for_update()
        )  # None: no pair row yet (a pool proxy's first use) or no gate
        if waits_until is not None and waits_until > now:
            return False
    values: dict[str, Any] = {
        "last_used_at": now,
        "hour_started_at": case((_new_hour(now), now), else_=Proxy.hour_started_at),
        "hour_requests": case((_new_hour(now), 1), else_=Proxy.hour_requests + 1),
    }
    conditions = [Proxy.id == proxy.id, _within_hourly_budget(now)]
    if policy.strategy == "exclusive":
        values |= {
            "lease_owner": owner,
            "lease_expires_at": now + timedelta(seconds=settings.lease_seconds),
        }
        conditions.append(or_(Proxy.lease_owner.is_(None), Proxy.lease_expires_at < now))
    result = await session.execute(
        update(Proxy)
        .where(*conditions)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if not getattr(result, "rowcount", 0):
        return False
    pair: dict[str, Any] = {"last_used_at": now}
    if policy.rate_limit_rps:
        pair["next_request_at"] = now + timedelta(seconds=1.0 / policy.rate_limit_rps)
    if mapping is None:  # first use of a pool proxy by this domain: its own counters start
        insert = insert_ignoring_conflicts(
            session, DomainProxy.__table__, on=["domain_id", "proxy_id"]
        )
        await session.execute(
            insert.values(
                domain_id=policy.domain_id,
                proxy_id=proxy.id,
                source="pool",
                is_active=True,
                priority=5,
                success_count=0,
                failure_count=0,
                created_at=now,
                updated_at=now,
                **pair,
            )
        )
    await session.execute(
        update(DomainProxy)
        .where(*this_pair)
        .values(**pair)
        .execution_options(synchronize_session=False)
    )
    return True


async def _unavailable(
    session: AsyncSession, policy: DomainPolicy, usable: Any, now: datetime
) -> NoProxyAvailable:
    """Why nothing was picked, and when to look again."""
    spent = ~_within_hourly_budget(now)
    candidates = usable.with_only_columns(
        func.count(Proxy.id),
        func.min(DomainProxy.next_request_at),
        func.sum(case((spent, 1), else_=0)),
        func.min(case((spent, Proxy.hour_started_at))),
    ).order_by(None)
    count, next_request, spent_count, first_hour = (await session.execute(candidates)).one()
    country = f" in country {policy.required_country_code}" if policy.required_country_code else ""
    if not count:
        return NoProxyAvailable(f"no usable proxy{country} for this domain", None)
    if spent_count == count and first_hour is not None:
        wait = max(1.0, (first_hour + HOUR - now).total_seconds())
        return NoProxyAvailable(
            f"all {count} usable proxies{country} used their max_requests_per_hour", wait
        )
    wait = 1.0
    if next_request is not None and next_request > now:
        wait = max(0.01, min(wait, (next_request - now).total_seconds()))
    return NoProxyAvailable(f"all {count} usable proxies{country} are busy", wait)


async def release_proxy(session: AsyncSession, proxy_id: int, owner: str) -> bool:
    """End ``owner``'s exclusive lease; the release time counts as the proxy's last use."""
    result = await session.execute(
        update(Proxy)
        .where(Proxy.id == proxy_id, Proxy.lease_owner == owner)
        .values(lease_owner=None, lease_expires_at=None, last_used_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


async def take_bound_proxy(
    session: AsyncSession,
    policy: DomainPolicy,
    settings: Settings,
    box: SecretBox | None,
    proxy_id: int,
    *,
    owner: str,
) -> ProxyChoice | Literal["unusable", "busy"]:
    """Take the one proxy a sticky session is bound to, as ``choose_proxy`` takes a pick, or say
    why not: ``unusable`` (disabled, deleted, its mapping failed, wrong country: never again for
    this session) or ``busy`` (breaker, rate, hourly budget or another's exclusive lease: now)."""
    now = utcnow()
    on = and_(DomainProxy.proxy_id == Proxy.id, DomainProxy.domain_id == policy.domain_id)
    usable = (
        select(Proxy, DomainProxy)
        .outerjoin(DomainProxy, on)
        .where(Proxy.id == proxy_id, *_usable(policy, settings.mapping_failure_limit))
    )
    if (await session.execute(usable.with_only_columns(Proxy.id))).one_or_none() is None:
        return "unusable"
    row = (
        await session.execute(
            usable.where(*_free_now(policy, settings, now)).with_for_update(
                of=Proxy, skip_locked=True
            )
        )
    ).one_or_none()
    if row is None:
        return "busy"
    proxy, mapping = row
    if not await _take(session, policy, settings, proxy, mapping, owner, now):
        return "busy"
    lease = owner if policy.strategy == "exclusive" else None
    return ProxyChoice(proxy.id, proxy_url(proxy, box), lease)
