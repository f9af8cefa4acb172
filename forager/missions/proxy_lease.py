"""Proxies for worker-service sessions: seed §6.1 draw, §6.2 release, §6.3 failures.

One lease for everything: a proxy held by a worker service (``in_use_by_worker_id``) is
invisible to crawl selection (``forager.proxies.selection``), and a proxy under a crawl's exclusive
lease (``lease_owner`` not expired) is invisible here. The draw is random among active, free
proxies whose breaker lets work through, never the worker's previous proxy (§4.3), locked with
``FOR UPDATE SKIP LOCKED`` (SQLite: the write lock of ``BEGIN IMMEDIATE``) and taken with a
compare-and-set, so two services never hold one proxy.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import breakers
from forager.db.models import Proxy
from forager.proxies.health import record_proxy_health


def proxy_label(proxy: Proxy) -> str:
    """What the seed logs as ``proxy_name`` / ``proxy_used``: the name, else host:port."""
    return proxy.name or f"{proxy.proxy_url}:{proxy.proxy_port}"


@dataclass(frozen=True, slots=True)
class LeasedProxy:
    id: int
    name: str
    server: str  # scheme://host:port
    username: str | None
    password: str | None  # plain text: goes to the worker service only, never logged

    def payload(self) -> dict[str, str | None]:
        """The ``proxy`` object of ``POST /session`` (seed §5.2 step 2.2.4)."""
        return {"server": self.server, "username": self.username, "password": self.password}


def _free(now: datetime, settings: Settings) -> list[Any]:
    return [
        Proxy.is_active.is_(True),
        Proxy.in_use_by_worker_id.is_(None),
        or_(Proxy.lease_owner.is_(None), Proxy.lease_expires_at < now),
        breakers.allows(Proxy, settings, now),
    ]


async def lease(
    session: AsyncSession,
    worker_id: int,
    *,
    avoid: int | None,
    settings: Settings,
    box: SecretBox,
    now: datetime,
) -> LeasedProxy | None:
    """Draw and reserve a proxy for ``worker_id``; ``None`` when none is free (ERROR501)."""
    conditions = _free(now, settings)
    if avoid is not None:
        conditions.append(Proxy.id != avoid)
    for _ in range(3):  # a pick taken meanwhile by another process: draw again
        proxy = (
            await session.scalars(
                select(Proxy)
                .where(*conditions)
                .order_by(func.random())
                .limit(1)
                .with_for_update(skip_locked=True)
            )
        ).first()
        if proxy is None:
            return None
        taken = await session.execute(
            update(Proxy)
            .where(Proxy.id == proxy.id, *_free(now, settings))
            .values(in_use_by_worker_id=worker_id, last_used_at=now)
            .execution_options(synchronize_session=False)
        )
        if getattr(taken, "rowcount", 0):
            password = box.decrypt(proxy.proxy_password) if proxy.proxy_password else None
            return LeasedProxy(
                proxy.id,
                proxy_label(proxy),
                f"{proxy.proxy_protocol}://{proxy.proxy_url}:{proxy.proxy_port}",
                proxy.proxy_username,
                password,
            )
    return None


async def held_by(session: AsyncSession, worker_id: int) -> Proxy | None:
    """The proxy ``worker_id`` holds now, if any."""
    return (
        await session.scalars(select(Proxy).where(Proxy.in_use_by_worker_id == worker_id))
    ).first()


async def release(session: AsyncSession, worker_id: int) -> None:
    """Seed §6.2: whatever ``worker_id`` holds goes back to the pool."""
    await session.execute(
        update(Proxy)
        .where(Proxy.in_use_by_worker_id == worker_id)
        .values(in_use_by_worker_id=None)
        .execution_options(synchronize_session=False)
    )


async def release_orphans(session: AsyncSession, idle_worker_ids: list[int]) -> None:
    """Seed §5.6 step 3: proxies held by services with no session go back to the pool."""
    if idle_worker_ids:
        await session.execute(
            update(Proxy)
            .where(Proxy.in_use_by_worker_id.in_(idle_worker_ids))
            .values(in_use_by_worker_id=None)
            .execution_options(synchronize_session=False)
        )


async def session_outcome(
    session: AsyncSession, proxy_id: int, *, ok: bool, settings: Settings
) -> None:
    """Seed §6.3 through the proxy's own health: a session failure counts, and
    ``mission_proxy_failure_limit`` failures in a row disable it (the background re-test
    brings it back, as for crawling); a ready session resets the streak."""
    limit = settings.mission_proxy_failure_limit
    mission_rules = settings.model_copy(update={"proxy_failure_limit": limit})
    await record_proxy_health(session, proxy_id, ok=ok, response_ms=None, settings=mission_rules)
