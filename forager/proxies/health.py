"""Proxy health: what an outcome through a proxy says about it, the counters that records, and
the per-domain health view with the seed's two alerts.

One classification serves every fetch through a proxy, the operator's test fetch, the background
re-test and the crawl alike (``verdict``, reading each type's ``proxy_verdict`` in
``forager.errors.EFFECTS``):

- the proxy failed (refused, unreachable, timed out): it counts against the proxy everywhere;
- the site refused this proxy's exit address (a ban: 429, a block or robot-check page, a CAPTCHA,
  a connection reset through the proxy): it counts against the proxy for that domain only,
  another site may still welcome it;
- Forager refused the target before anything went through the proxy (``egress_denied``): it
  says nothing about the proxy and is not recorded;
- anything else is an answer from the site through the proxy (a 404, a 5xx): the proxy worked.

The limits are the settings ``FORAGER_MAPPING_FAILURE_LIMIT`` (a domain's mapping) and
``FORAGER_PROXY_FAILURE_LIMIT`` (the proxy everywhere): consecutive failures that disable it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from sqlalchemy import Integer, and_, case, cast, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import breakers
from forager.db.models import Domain, DomainProxy, Proxy
from forager.db.types import utcnow
from forager.errors import ProxyVerdict, effect

# Weight of the newest response time in the moving average.
EWMA_ALPHA = 0.3
MIN_ACTIVE_PROXIES = 3  # seed alert 1: fewer active proxies than this for an active domain
MAX_FAILURE_RATE_PERCENT = 10.0  # seed alert 2: a domain's proxies fail more often than this


def verdict(error_type: str | None, *, ban: bool = False) -> ProxyVerdict:
    """What a fetch through a proxy says about the proxy (``error_type`` ``None``: it answered).

    ``ban`` is the fetch's own ban classification (``politeness.bans.classify_error``): a connection
    reset through the proxy is a ``proxy`` error that is nonetheless a ban.
    """
    if error_type is None:
        return "ok"
    said = effect(error_type).proxy_verdict
    return "ban" if ban and said != "none" else said


async def record_verdict(
    session: AsyncSession,
    proxy_id: int,
    outcome: ProxyVerdict,
    *,
    domain_id: int | None,
    response_ms: int | None,
    settings: Settings,
) -> None:
    """Count ``outcome`` on the proxy and (with ``domain_id``) on the domain's mapping.

    Rows are locked proxy first, then mapping: the order ``choose_proxy`` takes them in, so a
    fetch's verdict and another fetch's pick of the same proxy cannot deadlock on PostgreSQL.
    """
    if outcome == "none" or (outcome == "ban" and domain_id is None):
        return
    ok = outcome == "ok"
    if outcome != "ban":
        await record_proxy_health(
            session, proxy_id, ok=ok, response_ms=response_ms, settings=settings
        )
    if domain_id is not None:
        await record_mapping_health(
            session, domain_id, proxy_id, ok=ok, response_ms=response_ms, settings=settings
        )


def mean(value: Any) -> float | None:
    return None if value is None else round(float(value), 1)


def rate(part: int, whole: int) -> float | None:
    return round(part * 100 / whole, 2) if whole else None


# -- counters ---------------------------------------------------------------------------


def _ewma(column: Any, sample_ms: int) -> Any:
    blended = cast(column * (1 - EWMA_ALPHA) + sample_ms * EWMA_ALPHA, Integer)
    return case((column.is_(None), sample_ms), else_=blended)


async def record_mapping_health(
    session: AsyncSession,
    domain_id: int,
    proxy_id: int,
    *,
    ok: bool,
    response_ms: int | None,
    settings: Settings,
) -> None:
    """The domain's own view of the proxy: success streak, failures, EWMA latency."""
    limit = settings.mapping_failure_limit
    m = DomainProxy
    values: dict[str, Any]
    if ok:
        values = {"success_count": m.success_count + 1, "failure_count": 0}
        if response_ms is not None:
            values["avg_response_time_ms"] = _ewma(m.avg_response_time_ms, response_ms)
    else:
        values = {
            "failure_count": m.failure_count + 1,
            "is_active": case((m.failure_count + 1 >= limit, False), else_=m.is_active),
        }
    await session.execute(
        update(m).where(m.domain_id == domain_id, m.proxy_id == proxy_id).values(**values)
    )


async def record_proxy_health(
    session: AsyncSession,
    proxy_id: int,
    *,
    ok: bool,
    response_ms: int | None,
    settings: Settings,
) -> None:
    """The proxy's health across all domains; consecutive failures disable it.

    A proxy disabled by its failures gets ``retest_at``: the background re-test
    (``forager.proxies.retest``) tries it then and enables it again when it works.
    """
    now = utcnow()
    limit = settings.proxy_failure_limit
    values: dict[str, Any]
    if ok:
        values = {
            "success_count": Proxy.success_count + 1,
            "failure_count": 0,
            "last_success_at": now,
        }
        if response_ms is not None:
            values["avg_response_time_ms"] = _ewma(Proxy.avg_response_time_ms, response_ms)
    else:
        disables = and_(Proxy.is_active.is_(True), Proxy.failure_count + 1 >= limit)
        retest = now + timedelta(seconds=settings.proxy_retest_base_seconds)
        values = {
            "failure_count": Proxy.failure_count + 1,
            "last_failure_at": now,
            "is_active": case((disables, False), else_=Proxy.is_active),
            "retest_at": case((disables, retest), else_=Proxy.retest_at),
        }
    values |= breakers.outcome_values(Proxy, settings, now, ok=ok) | breakers.tally(Proxy, ok=ok)
    rows = await session.execute(
        update(Proxy)
        .where(Proxy.id == proxy_id)
        .values(**values)
        .returning(*breakers.returning(Proxy))
        .execution_options(synchronize_session=False)
    )
    breakers.transitions(session, "proxy", rows, now)


# -- health view and alerts ---------------------------------------------------------------


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
    failing = row.failure_rate_percent
    if failing is not None and failing > MAX_FAILURE_RATE_PERCENT:
        message = f"proxy failure rate {failing:g} % (over {MAX_FAILURE_RATE_PERCENT:g} %)"
        alerts.append(Alert("high_failure_rate", row.domain_id, row.domain_name, message))
    return alerts


async def proxy_health(
    session: AsyncSession, settings: Settings
) -> tuple[list[DomainHealth], list[Alert]]:
    """Every domain's proxy pool health (seed dashboard query) and the seed's two alerts.

    A failing mapping is one its failures disabled: ``FORAGER_MAPPING_FAILURE_LIMIT`` in a row.
    """
    rows = await session.execute(
        select(
            Domain.id,
            Domain.domain_name,
            Domain.is_active,
            func.count(DomainProxy.id),
            func.count(case((DomainProxy.is_active.is_(True), 1))),
            func.count(case((DomainProxy.failure_count >= settings.mapping_failure_limit, 1))),
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
            avg_response_time_ms=mean(avg_ms),
            total_success=int(ok),
            total_failures=int(failed),
            failure_rate_percent=rate(int(failed), int(ok) + int(failed)),
        )
        for d_id, name, d_active, total, active, failing, avg_ms, ok, failed in rows
    ]
    return domains, [alert for row in domains for alert in _alerts(row)]
