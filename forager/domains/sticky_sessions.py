"""Sticky sessions (issue 33), after Crawlee's ``SessionPool``: a session is a cookie jar, the
proxy it is bound to and an error score, reused by a domain's fetches until it is worn out.

A domain whose ``sticky_sessions`` policy is set fetches through one of its sessions:

- ``take`` leases a session to one fetch, exclusively, across processes and hosts: a
  compare-and-set on ``lease_owner`` / ``lease_expires_at`` (an expired lease is free again, as
  a dead worker's). The least recently used free session of the right kind (through a proxy or
  direct) is taken, with its bound proxy taken as a proxy pick is (``proxies.selection``); with
  none free a new one is made, its proxy picked by the domain's proxy policy.
- ``warm`` fetches the policy's warm-up URL first through a new session, keeping its cookies.
- ``give_back`` keeps the cookies the answer set (sealed by the ``SecretBox``: cookies can be
  secrets) and ends the lease. A fetch that politeness judges a ban (block or robot-check page,
  429, a proxy reset: ``politeness.outcomes.judge``) retires the session; a fault that retries
  (network, timeout, 5xx) adds 1 to its error score (retired at ``MAX_ERROR_SCORE``), an answer
  takes 0.5 off. After ``max_uses`` fetches or ``max_age_minutes`` it is retired too, and the
  next fetch makes a new one.

Every creation and retirement is an event of the domain (``session_created`` /
``session_retired`` with the reason); a retired session's cookies are erased.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import case, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import Domain, DomainSession
from forager.db.types import utcnow
from forager.errors import FetchError, effect
from forager.fetch.base import Fetcher, FetchRequest
from forager.politeness.outcomes import judge
from forager.proxies.selection import DomainPolicy, ProxyChoice, take_bound_proxy

log = logging.getLogger(__name__)

ACTIVE, RETIRED = "active", "retired"
# Crawlee's defaults: a failure adds 1, an answer takes 0.5 off, retired at 3.
MAX_ERROR_SCORE = 3.0
_GOOD = 0.5
DEFAULT_MAX_USES = 50  # Crawlee's maxUsageCount
DEFAULT_MAX_AGE_MINUTES = 50.0  # Crawlee's maxAgeSecs (3000 s)
_CANDIDATES = 5  # free sessions looked at per take before a new one is made

ChooseProxy = Callable[[AsyncSession, DomainPolicy], Awaitable[ProxyChoice | None]]


@dataclass(frozen=True, slots=True)
class SessionPolicy:
    """A domain's ``sticky_sessions`` setting."""

    max_uses: int = DEFAULT_MAX_USES
    max_age_minutes: float = DEFAULT_MAX_AGE_MINUTES
    warmup_url: str | None = None

    @classmethod
    def of(cls, stored: Mapping[str, Any] | None) -> SessionPolicy | None:
        if not stored:
            return None
        return cls(
            int(stored.get("max_uses") or DEFAULT_MAX_USES),
            float(stored.get("max_age_minutes") or DEFAULT_MAX_AGE_MINUTES),
            stored.get("warmup_url") or None,
        )

    def worn_out(self, uses: int, created_at: datetime, now: datetime) -> str | None:
        """Why a session is to be retired now, if it is (``max_uses`` / ``max_age``)."""
        if uses >= self.max_uses:
            return "max_uses"
        if now - created_at >= timedelta(minutes=self.max_age_minutes):
            return "max_age"
        return None


def stored(given: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A policy as the API gives it (``enabled``, …) in the domain's column (None: off)."""
    policy = SessionPolicy.of(given) if given and given.get("enabled", True) else None
    if policy is None:
        return None
    return {
        "max_uses": policy.max_uses,
        "max_age_minutes": policy.max_age_minutes,
        "warmup_url": policy.warmup_url,
    }


class SessionTask(Protocol):
    """What a session needs of a task (a ``ClaimedTask`` is one)."""

    @property
    def id(self) -> int: ...
    @property
    def domain_id(self) -> int: ...
    @property
    def sticky_sessions(self) -> dict[str, Any] | None: ...


@dataclass(slots=True)
class Lease:
    """One fetch's hold on a session; ``cookies`` (in clear) live in memory only."""

    session_id: int
    domain_id: int
    owner: str
    policy: SessionPolicy
    created_at: datetime
    uses: int
    proxy: ProxyChoice | None = None
    new: bool = False
    cookies: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def jar(self) -> str:
        """The opaque name a fetcher keeps this jar's state under (the browser's context)."""
        return f"session-{self.session_id}"


def _free(now: datetime) -> Any:
    return or_(DomainSession.lease_owner.is_(None), DomainSession.lease_expires_at < now)


def retire_event(
    session: AsyncSession, domain_id: int, session_id: int, reason: str, uses: int | None
) -> None:
    audit.record(
        session,
        "domain",
        [domain_id],
        "session_retired",
        {"session_id": session_id, "reason": reason, "uses": uses},
    )


class StickySessions:
    """One per process; every method runs in a transaction of its own."""

    def __init__(self, db: Database, settings: Settings, box: SecretBox | None) -> None:
        self.db = db
        self.settings = settings
        self.box = box

    # -- take ---------------------------------------------------------------------------------

    async def take(
        self, task: SessionTask, owner: str, choose: ChooseProxy | None = None
    ) -> Lease | None:
        """Lease a session of ``task``'s domain to ``owner`` (None: the domain has no sessions).

        ``choose`` picks a new session's proxy (the fetch policy's ``choose``: it may raise
        ``NoProxyAvailable``); without it the fetch is direct and so are its sessions.
        """
        policy = SessionPolicy.of(task.sticky_sessions)
        if policy is None:
            return None
        async with self.db.session() as session:
            proxies = None
            if choose is not None:
                domain = await session.scalar(
                    select(Domain)
                    .where(Domain.id == task.domain_id)
                    .options(defer(Domain.robots_txt_content))
                )
                proxies = DomainPolicy.of(domain) if domain is not None else None
                if proxies is None:
                    choose = None
            lease = await self._reuse(session, task.domain_id, policy, owner, proxies)
            if lease is None:
                proxy = await choose(session, proxies) if choose and proxies else None
                lease = await self._create(session, task.domain_id, policy, owner, proxy)
            return lease

    async def _reuse(
        self,
        session: AsyncSession,
        domain_id: int,
        policy: SessionPolicy,
        owner: str,
        proxies: DomainPolicy | None,
    ) -> Lease | None:
        now = utcnow()
        kind = (
            DomainSession.proxy_id.is_not(None)
            if proxies is not None
            else DomainSession.proxy_id.is_(None)
        )
        rows = (
            await session.execute(
                select(DomainSession)
                .where(
                    DomainSession.domain_id == domain_id,
                    DomainSession.state == ACTIVE,
                    kind,
                    _free(now),
                )
                .order_by(DomainSession.last_used_at.asc().nulls_first(), DomainSession.id)
                .limit(_CANDIDATES)
            )
        ).scalars()
        for row in list(rows):
            worn = policy.worn_out(row.uses, row.created_at, now)
            if worn is not None:
                await self._retire(session, row.id, domain_id, worn, row.uses, free_only=True)
                continue
            if not await self._lease(session, row.id, owner, now):
                continue  # another process took it meanwhile
            proxy: ProxyChoice | None = None
            if proxies is not None and row.proxy_id is not None:
                bound = await take_bound_proxy(
                    session, proxies, self.settings, self.box, row.proxy_id, owner=owner
                )
                if bound == "unusable":
                    await self._retire(session, row.id, domain_id, "proxy_unusable", row.uses)
                    continue
                if bound == "busy":
                    await self._unlease(session, row.id, owner)
                    continue
                proxy = bound
            await session.execute(
                update(DomainSession)
                .where(DomainSession.id == row.id)
                .values(uses=DomainSession.uses + 1, last_used_at=now)
                .execution_options(synchronize_session=False)
            )
            return Lease(
                row.id,
                domain_id,
                owner,
                policy,
                row.created_at,
                row.uses + 1,
                proxy,
                cookies=self._open(row.cookies_sealed),
            )
        return None

    async def _create(
        self,
        session: AsyncSession,
        domain_id: int,
        policy: SessionPolicy,
        owner: str,
        proxy: ProxyChoice | None,
    ) -> Lease:
        now = utcnow()
        row = DomainSession(
            domain_id=domain_id,
            state=ACTIVE,
            proxy_id=proxy.proxy_id if proxy else None,
            uses=1,
            error_score=0.0,
            lease_owner=owner,
            lease_expires_at=self._expiry(now),
            created_at=now,
            last_used_at=now,
        )
        session.add(row)
        await session.flush()
        audit.record(
            session,
            "domain",
            [domain_id],
            "session_created",
            {"session_id": row.id, "proxy_id": row.proxy_id},
        )
        return Lease(row.id, domain_id, owner, policy, now, 1, proxy, new=True)

    def _expiry(self, now: datetime) -> datetime:
        # A fetch (a warm-up and the page, each within the fetch timeout) and its parse, or an
        # agent's fetch and upload (the hub's task deadline, ``agents.liveness``).
        s = self.settings
        hold = max(s.lease_seconds, s.agent_timeout_seconds) + 2 * s.fetch_timeout_seconds
        return now + timedelta(seconds=hold)

    async def _lease(
        self, session: AsyncSession, session_id: int, owner: str, now: datetime
    ) -> bool:
        """The compare-and-set: ``owner`` holds the session if it was free."""
        result = await session.execute(
            update(DomainSession)
            .where(DomainSession.id == session_id, DomainSession.state == ACTIVE, _free(now))
            .values(lease_owner=owner, lease_expires_at=self._expiry(now))
            .execution_options(synchronize_session=False)
        )
        return bool(getattr(result, "rowcount", 0))

    async def _unlease(self, session: AsyncSession, session_id: int, owner: str) -> None:
        await session.execute(
            update(DomainSession)
            .where(DomainSession.id == session_id, DomainSession.lease_owner == owner)
            .values(lease_owner=None, lease_expires_at=None)
            .execution_options(synchronize_session=False)
        )

    # -- warm up, give back -------------------------------------------------------------------

    async def warm(self, lease: Lease, fetcher: Fetcher, request: FetchRequest) -> None:
        """A new session's first fetch is the policy's warm-up URL (a plain GET through the
        same fetcher and proxy, with the same profile); its cookies join the jar. Raises the
        warm-up's ``FetchError``."""
        if not lease.new or lease.policy.warmup_url is None:
            return
        warmup = replace(
            request,
            url=lease.policy.warmup_url,
            method="GET",
            body=None,
            body_type=None,
            on_sent=None,
            wait_for_selector=None,
        )
        response = await fetcher.fetch(warmup)
        lease.cookies |= response.cookies
        log.info("session %s warmed up (%d cookies)", lease.session_id, len(lease.cookies))

    async def give_back(
        self, lease: Lease, cookies: Mapping[str, str] | None, error: FetchError | None = None
    ) -> str | None:
        """End ``lease`` after its fetch: keep the cookies the answer set, or retire the session
        when ``error`` is a ban. Returns the reason it was retired for (None: still active)."""
        now = utcnow()
        banned = error is not None and judge(error).ban
        async with self.db.session() as session:
            if banned and error is not None:
                retired = await self._retire(
                    session,
                    lease.session_id,
                    lease.domain_id,
                    error.error_type,
                    lease.uses,
                    owner=lease.owner,
                )
                return error.error_type if retired else None
            jar = lease.cookies | dict(cookies or {})
            score: Any = _lowered()  # an answer
            if error is not None:  # a fault (network, timeout, 5xx) counts; a 404 says nothing
                score = DomainSession.error_score + (1.0 if effect(error.error_type).retry else 0.0)
            result = await session.execute(
                update(DomainSession)
                .where(
                    DomainSession.id == lease.session_id,
                    DomainSession.lease_owner == lease.owner,
                    DomainSession.state == ACTIVE,
                )
                .values(
                    cookies_sealed=self._seal(jar),
                    error_score=score,
                    lease_owner=None,
                    lease_expires_at=None,
                )
                .returning(DomainSession.error_score)
            )
            kept = result.scalar_one_or_none()
            if kept is None:  # the lease expired and the session went on without this fetch
                log.warning("session %s: lease lost before its fetch ended", lease.session_id)
                return None
            reason = lease.policy.worn_out(lease.uses, lease.created_at, now)
            if reason is None and kept >= MAX_ERROR_SCORE:
                reason = "errors"
            if reason is not None:
                await self._retire(
                    session, lease.session_id, lease.domain_id, reason, lease.uses, free_only=True
                )
            return reason

    async def release(self, lease: Lease | None) -> None:
        """End ``lease`` with nothing learned (the fetch never happened: an agent gave its task
        back or went away); the session is free again as it was."""
        if lease is not None:
            async with self.db.session() as session:
                await self._unlease(session, lease.session_id, lease.owner)

    # -- retire -------------------------------------------------------------------------------

    async def _retire(
        self,
        session: AsyncSession,
        session_id: int,
        domain_id: int,
        reason: str,
        uses: int | None,
        *,
        owner: str | None = None,
        free_only: bool = False,
    ) -> bool:
        """Retire an active session (held by ``owner``, or free with ``free_only``, or in any
        case), its cookies erased; the event says why. False if it was not so."""
        now = utcnow()
        where = [DomainSession.id == session_id, DomainSession.state == ACTIVE]
        if owner is not None:
            where.append(DomainSession.lease_owner == owner)
        elif free_only:
            where.append(_free(now))
        result = await session.execute(
            update(DomainSession)
            .where(*where)
            .values(
                state=RETIRED,
                retired_at=now,
                retired_reason=reason,
                cookies_sealed=None,
                lease_owner=None,
                lease_expires_at=None,
            )
            .execution_options(synchronize_session=False)
        )
        if not getattr(result, "rowcount", 0):
            return False
        retire_event(session, domain_id, session_id, reason, uses)
        log.info("session %s of domain %s retired: %s", session_id, domain_id, reason)
        return True

    # -- the sealed jar -----------------------------------------------------------------------

    def _seal(self, jar: Mapping[str, str]) -> str | None:
        if not jar:
            return None
        if self.box is None:
            raise RuntimeError("a session's cookies are stored through the secret box")
        return self.box.encrypt(json.dumps(dict(jar), separators=(",", ":")))

    def _open(self, sealed: str | None) -> dict[str, str]:
        if not sealed:
            return {}
        if self.box is None:
            raise RuntimeError("a session's cookies are read through the secret box")
        opened = json.loads(self.box.decrypt(sealed))
        return {str(k): str(v) for k, v in opened.items()}


def _lowered() -> Any:
    """An answer takes ``_GOOD`` off the error score, never below zero."""
    return case((DomainSession.error_score > _GOOD, DomainSession.error_score - _GOOD), else_=0.0)
