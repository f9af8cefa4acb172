"""What the fetch phase asks before and tells after each request: robots.txt, the proxy to use,
and where an outcome is booked.

The pipeline stays a sequence of phases; it asks this one object:

- before: ``robots`` (allowed? was robots.txt fetched just now?), ``choose`` (a proxy, or
  direct, or ``NoProxyAvailable``; the proxy a ban came through is avoided on the retry);
- after: ``succeeded`` / ``failed`` tell the proxy (``proxies.health``: everywhere, or for this
  domain only when it was a ban, a ban told by ``politeness.bans``) and end an exclusive lease,
  then the domain (``politeness.outcomes``: its breaker and adaptive delay).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import CrawlAttempt
from forager.domains.robots import RobotsRules, RobotsState, Verdict
from forager.errors import LOST_TYPES, FetchError, effect
from forager.fetch.base import Fetcher
from forager.politeness import bans
from forager.politeness.outcomes import DomainOutcomes
from forager.proxies import health
from forager.proxies.selection import DomainPolicy, ProxyChoice, choose_proxy, release_proxy

_ALLOWED = Verdict(True, False)


class PolicyTask(Protocol):
    """What the policy needs of a task (the queue's ``PolicyTask`` is one)."""

    @property
    def id(self) -> int: ...
    @property
    def domain_id(self) -> int: ...
    @property
    def url(self) -> str: ...
    @property
    def user_agent(self) -> str: ...
    @property
    def ignore_robots(self) -> bool: ...
    @property
    def domain_name(self) -> str: ...
    @property
    def robots_fetched_at(self) -> datetime | None: ...


class FetchPolicy:
    """One per worker process; methods taking a session run inside the caller's transaction.

    ``fetcher`` is what robots.txt is fetched through (the process's fetchers, as pages are);
    a policy without one (the writer's: bookkeeping only) cannot check robots.txt.
    """

    def __init__(
        self,
        db: Database,
        settings: Settings,
        box: SecretBox | None,
        worker_id: str,
        *,
        fetcher: Fetcher | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.box = box
        self.worker_id = worker_id
        self.outcomes = DomainOutcomes(settings)
        self.robots_rules = (
            RobotsRules(db, settings, fetcher=fetcher, box=box)
            if fetcher is not None and box is not None
            else None
        )

    async def robots(self, task: PolicyTask) -> Verdict:
        if task.ignore_robots:  # known from the claim: no read at all
            return _ALLOWED
        if self.robots_rules is None:
            raise RuntimeError("this fetch policy has no fetcher and secret box for robots.txt")
        known = RobotsState(task.domain_id, task.domain_name, False, task.robots_fetched_at)
        return await self.robots_rules.check(task.domain_id, task.url, task.user_agent, known=known)

    def owner(self, task: PolicyTask) -> str:
        """The lease owner of an exclusive proxy: this worker's session for this task."""
        return f"{self.worker_id}:{task.id}"

    async def choose(
        self, session: AsyncSession, task: PolicyTask, domain: DomainPolicy
    ) -> ProxyChoice | None:
        """The proxy for this fetch of ``task`` (``None``: go direct), by ``domain``'s policy."""
        last = (
            await session.execute(
                select(CrawlAttempt.proxy_id, CrawlAttempt.error_type)
                .where(
                    CrawlAttempt.task_id == task.id,
                    CrawlAttempt.phase == "fetch",
                    # A try a dead worker lost says nothing about any proxy: the ban before
                    # it still decides the rotation (``Effect.lost``).
                    or_(
                        CrawlAttempt.error_type.is_(None),
                        CrawlAttempt.error_type.not_in(LOST_TYPES),
                    ),
                )
                .order_by(CrawlAttempt.id.desc())
                .limit(1)
            )
        ).one_or_none()
        avoid: frozenset[int] = frozenset()
        if last is not None and last.proxy_id is not None and effect(last.error_type).rotate_proxy:
            avoid = frozenset({last.proxy_id})
        return await choose_proxy(
            session,
            domain,
            self.settings,
            self.box,
            owner=self.owner(task),
            avoid=avoid,
        )

    async def succeeded(
        self,
        session: AsyncSession,
        task: PolicyTask,
        proxy: ProxyChoice | None,
        elapsed_ms: int,
    ) -> None:
        """The site answered ``task``'s fetch in ``elapsed_ms`` (through ``proxy``, if any)."""
        if proxy is not None:
            await health.record_verdict(
                session,
                proxy.proxy_id,
                "ok",
                domain_id=task.domain_id,
                response_ms=elapsed_ms,
                settings=self.settings,
            )
            await self.release(session, proxy)
        await self.outcomes.answered(session, task.domain_id, elapsed_ms)

    async def failed(
        self,
        session: AsyncSession,
        task: PolicyTask,
        proxy: ProxyChoice | None,
        exc: FetchError,
    ) -> float | None:
        """Record a failed fetch; returns ``Retry-After`` seconds when the site sent one.

        A 403/503 block page is re-typed ``blocked`` here (retryable, rotates the proxy).
        """
        ban = bans.classify_error(exc)
        if proxy is not None:
            # A fault counts against the proxy everywhere, a ban for this domain only, an
            # egress refusal not at all (nothing went through the proxy): ``proxies.health``.
            await health.record_verdict(
                session,
                proxy.proxy_id,
                health.verdict(exc.error_type, ban=ban),
                domain_id=task.domain_id,
                response_ms=None,
                settings=self.settings,
            )
            await self.release(session, proxy)
        return await self.outcomes.failed(session, task.domain_id, exc, direct=proxy is None)

    async def release(self, session: AsyncSession, proxy: ProxyChoice) -> None:
        if proxy.lease_owner is not None:
            await release_proxy(session, proxy.proxy_id, proxy.lease_owner)

    async def succeeded_direct(
        self, session: AsyncSession, outcomes: Sequence[tuple[int, int]]
    ) -> None:
        """Many direct fetches that got an answer, as (domain id, response ms): no proxy to
        tell, only their domains (``DomainOutcomes.answered_many``)."""
        await self.outcomes.answered_many(session, outcomes)
