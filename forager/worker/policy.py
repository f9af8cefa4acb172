"""What the fetch phase asks before and tells after each request: robots.txt, the proxy to use,
and the bookkeeping of an outcome (proxy health, ban rotation, breakers, throttling).

The pipeline stays a sequence of phases; every fetch-policy decision is made here:

- before: ``robots`` (allowed? was robots.txt fetched just now?), ``choose`` (a proxy, or
  direct, or ``NoProxyAvailable``; the proxy a ban came through is avoided on the retry);
- after: ``succeeded`` / ``failed`` record the outcome on the proxy (everywhere, or for this
  domain only when it was a ban), on the domain's and the proxy's circuit breakers and on
  the domain's adaptive delay, and end an exclusive lease.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, Domain
from forager.db.types import utcnow
from forager.domains.robots import RobotsRules, RobotsState, Verdict
from forager.errors import FetchError, effect
from forager.fetch.base import Fetcher, FetchResponse
from forager.politeness import bans, breakers, throttle
from forager.proxies import health
from forager.proxies.selection import DomainPolicy, ProxyChoice, choose_proxy, release_proxy

_OVERLOAD_STATUSES = frozenset({429, 503})
_RETRY_AFTER_CAP = 86400.0  # a site asking for more than a day is taken at a day
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
                    # it still decides the rotation.
                    or_(
                        CrawlAttempt.error_type.is_(None),
                        CrawlAttempt.error_type != "lease_expired",
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
        await self._domain_breaker(session, task.domain_id, ok=True)
        await throttle.on_response(session, task.domain_id, self.settings, elapsed_ms)

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
        # The domain's breaker, by the type's ``site_breaker`` (``forager.errors.EFFECTS``).
        site = effect(exc.error_type).site_breaker
        if site == "fail" or (site == "fail_direct" and proxy is None):
            await self._domain_breaker(session, task.domain_id, ok=False)
        elif site == "ok":  # the site answered: it is up
            await self._domain_breaker(session, task.domain_id, ok=True)
        retry_after = None
        if exc.status_code in _OVERLOAD_STATUSES:
            headers = getattr(exc, "headers", {}) or {}
            retry_after = bans.retry_after_seconds(headers, _RETRY_AFTER_CAP)
            await throttle.on_overload(session, task.domain_id, self.settings, retry_after)
        return retry_after

    def page_ban(self, response: FetchResponse) -> FetchError | None:
        """A 2xx page that is a robot check / block page, as the fetch error it stands for."""
        found = bans.page_ban(response)
        if found is None:
            return None
        kind, message = found
        return FetchError(message, error_type=kind, status_code=response.status_code)

    async def release(self, session: AsyncSession, proxy: ProxyChoice) -> None:
        if proxy.lease_owner is not None:
            await release_proxy(session, proxy.proxy_id, proxy.lease_owner)

    async def _domain_breaker(self, session: AsyncSession, domain_id: int, *, ok: bool) -> None:
        now = utcnow()
        values = breakers.outcome_values(Domain, self.settings, now, ok=ok)
        rows = await session.execute(
            update(Domain)
            .where(Domain.id == domain_id)
            .values(**values, **breakers.tally(Domain, ok=ok))
            .returning(*breakers.returning(Domain))
            .execution_options(synchronize_session=False)
        )
        breakers.transitions(session, "domain", rows, now)

    async def succeeded_direct(
        self, session: AsyncSession, outcomes: Sequence[tuple[int, int]]
    ) -> None:
        """Many direct fetches that got an answer, as (domain id, response ms): per batch, one
        breaker statement (state and success count of each domain of the batch, transitions read
        back with ``RETURNING``) and a throttle step only for domains being throttled or
        answering slowly."""
        if not outcomes:
            return
        per_domain = Counter(domain_id for domain_id, _ in outcomes)
        domain_ids = sorted(per_domain)
        now = utcnow()
        values = breakers.outcome_values(Domain, self.settings, now, ok=True)
        rows = await session.execute(
            update(Domain)
            .where(Domain.id.in_(domain_ids))
            .values(**values, **breakers.tally(Domain, ok=True, per_id=per_domain))
            .returning(*breakers.returning(Domain))
            .execution_options(synchronize_session=False)
        )
        breakers.transitions(session, "domain", rows, now)
        slow_ms = self.settings.throttle_slow_seconds * 1000
        throttled = set(
            (
                await session.execute(
                    select(Domain.id).where(
                        Domain.id.in_(domain_ids), Domain.throttle_delay_seconds.is_not(None)
                    )
                )
            ).scalars()
        )
        for domain_id, elapsed_ms in outcomes:
            if domain_id in throttled or elapsed_ms >= slow_ms:
                await throttle.on_response(session, domain_id, self.settings, elapsed_ms)
