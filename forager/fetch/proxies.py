"""Proxy rotation for a domain: least recently used healthy mapped proxy (seed 004), and health."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from sqlalchemy import Integer, case, cast, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.crypto import SecretBox
from forager.db.models import DomainProxy, Proxy
from forager.db.types import utcnow

# A mapping stops being chosen after this many consecutive failures for its domain (seed 004).
MAPPING_FAILURE_LIMIT = 5
# A proxy is disabled everywhere after this many consecutive failures (seed 004).
PROXY_FAILURE_LIMIT = 10
# Outcomes that say the proxy (not the site's content) failed.
PROXY_FAULTS = frozenset({"proxy", "network", "timeout", "rate_limited", "captcha", "blocked"})
# Weight of the newest response time in the moving average.
EWMA_ALPHA = 0.3


@dataclass(frozen=True, slots=True)
class ProxyChoice:
    proxy_id: int
    url: str  # with credentials: keep in memory, never log or store

    @property
    def display(self) -> str:
        """The proxy without credentials, safe for logs."""
        scheme, _, rest = self.url.partition("://")
        return f"{scheme}://{rest.rpartition('@')[2]}"


def proxy_url(proxy: Proxy, box: SecretBox | None) -> str:
    auth = ""
    if proxy.proxy_username:
        password = box.decrypt(proxy.proxy_password) if proxy.proxy_password and box else ""
        auth = f"{quote(proxy.proxy_username, safe='')}:{quote(password, safe='')}@"
    return f"{proxy.proxy_protocol}://{auth}{proxy.proxy_url}:{proxy.proxy_port}"


async def choose_proxy(
    session: AsyncSession, domain_id: int, box: SecretBox | None
) -> ProxyChoice | None:
    """Lease-free LRU pick among the domain's active healthy proxies; ``None`` means go direct."""
    row = (
        await session.execute(
            select(DomainProxy, Proxy)
            .join(Proxy, Proxy.id == DomainProxy.proxy_id)
            .where(
                DomainProxy.domain_id == domain_id,
                DomainProxy.is_active.is_(True),
                Proxy.is_active.is_(True),
                DomainProxy.failure_count < MAPPING_FAILURE_LIMIT,
            )
            .order_by(DomainProxy.last_used_at.asc().nulls_first(), DomainProxy.id)
            .limit(1)
            .with_for_update(of=DomainProxy, skip_locked=True)
        )
    ).one_or_none()
    if row is None:
        return None
    mapping, proxy = row
    now = utcnow()
    await session.execute(
        update(DomainProxy).where(DomainProxy.id == mapping.id).values(last_used_at=now)
    )
    await session.execute(update(Proxy).where(Proxy.id == proxy.id).values(last_used_at=now))
    return ProxyChoice(proxy.id, proxy_url(proxy, box))


def _ewma(column: Any, sample_ms: int) -> Any:
    blended = cast(column * (1 - EWMA_ALPHA) + sample_ms * EWMA_ALPHA, Integer)
    return case((column.is_(None), sample_ms), else_=blended)


async def record_proxy_result(
    session: AsyncSession, domain_id: int, proxy_id: int, *, ok: bool, response_ms: int | None
) -> None:
    """Update the mapping's and the proxy's counters after a fetch through the proxy."""
    await record_mapping_health(session, domain_id, proxy_id, ok=ok, response_ms=response_ms)
    await record_proxy_health(session, proxy_id, ok=ok, response_ms=response_ms)


async def record_mapping_health(
    session: AsyncSession, domain_id: int, proxy_id: int, *, ok: bool, response_ms: int | None
) -> None:
    """The domain's own view of the proxy: success streak, failures, EWMA latency."""
    m = DomainProxy
    values: dict[str, Any]
    if ok:
        values = {"success_count": m.success_count + 1, "failure_count": 0}
        if response_ms is not None:
            values["avg_response_time_ms"] = _ewma(m.avg_response_time_ms, response_ms)
    else:
        values = {
            "failure_count": m.failure_count + 1,
            "is_active": case(
                (m.failure_count + 1 >= MAPPING_FAILURE_LIMIT, False), else_=m.is_active
            ),
        }
    await session.execute(
        update(m).where(m.domain_id == domain_id, m.proxy_id == proxy_id).values(**values)
    )


async def record_proxy_health(
    session: AsyncSession, proxy_id: int, *, ok: bool, response_ms: int | None
) -> None:
    """The proxy's health across all domains; consecutive failures disable it."""
    now = utcnow()
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
        values = {
            "failure_count": Proxy.failure_count + 1,
            "last_failure_at": now,
            "is_active": case(
                (Proxy.failure_count + 1 >= PROXY_FAILURE_LIMIT, False), else_=Proxy.is_active
            ),
        }
    await session.execute(update(Proxy).where(Proxy.id == proxy_id).values(**values))
