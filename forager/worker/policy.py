"""What the fetch phase asks before and tells after each request: robots.txt, the proxy to use,
and where an outcome is booked.

The pipeline stays a sequence of phases; it asks this one object:

- before: ``robots`` (allowed? was robots.txt fetched just now?), ``choose`` (a proxy, or
  direct, or ``NoProxyAvailable``; the proxy a ban came through is avoided on the retry);
- after: ``succeeded`` / ``failed`` (one fetch, booked at once) and ``book`` (a group) hand
  the outcome to ``politeness.outcomes``, which tells the proxy, ends its exclusive lease,
  then the domain.
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
from forager.politeness.outcomes import Outcome, Outcomes
from forager.proxies.selection import DomainPolicy, ProxyChoice, choose_proxy

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
        self.outcomes = Outcomes(settings)
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
        """The site answered ``task``'s fetch in ``elapsed_ms`` (``politeness.outcomes``)."""
        await self.outcomes.succeeded(session, task.domain_id, proxy, elapsed_ms)

    async def failed(
        self,
        session: AsyncSession,
        task: PolicyTask,
        proxy: ProxyChoice | None,
        exc: FetchError,
    ) -> float | None:
        """Book a failed fetch (``politeness.outcomes``); ``Retry-After`` seconds when the site
        sent one."""
        return await self.outcomes.failed_through(session, task.domain_id, proxy, exc)

    async def book(self, session: AsyncSession, outcomes: Sequence[Outcome]) -> None:
        """A group's outcomes, last in the writer's transaction (``politeness.outcomes``)."""
        await self.outcomes.book(session, outcomes)
