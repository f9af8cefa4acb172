"""What a fetch's outcome does: to the proxy it went through, and to its site.

Every outcome is booked here, in the caller's transaction (the writer's group commit, an image
download's). Through a proxy, the proxy is told first (``proxies.health``: a fault counts
against it everywhere, a ban — ``politeness.bans`` — for this domain only, an egress refusal
not at all) and its exclusive lease ends. Then the site: a failure counts on the domain's
breaker as its type's ``site_breaker`` in ``forager.errors.EFFECTS`` says, a 429 or 503 raises
the domain's delay and hands back the site's ``Retry-After``, and an answer is a success on the
breaker and a throttle step. The domain's row is written last, as a claim skips a locked domain.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import breakers
from forager.db.models import Domain
from forager.db.types import utcnow
from forager.errors import FetchError, effect
from forager.politeness import bans, throttle
from forager.proxies import health
from forager.proxies.selection import ProxyChoice, release_proxy


class Outcomes:
    """One per process's fetch policy; every method runs inside the caller's transaction."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def succeeded(
        self,
        session: AsyncSession,
        domain_id: int,
        proxy: ProxyChoice | None,
        elapsed_ms: int,
    ) -> None:
        """The site answered one fetch in ``elapsed_ms`` (through ``proxy``, if any)."""
        if proxy is not None:
            await health.record_verdict(
                session,
                proxy.proxy_id,
                "ok",
                domain_id=domain_id,
                response_ms=elapsed_ms,
                settings=self.settings,
            )
            await self.release(session, proxy)
        await self.answered(session, domain_id, elapsed_ms)

    async def failed_through(
        self,
        session: AsyncSession,
        domain_id: int,
        proxy: ProxyChoice | None,
        exc: FetchError,
    ) -> float | None:
        """One failed fetch (through ``proxy``, if any); ``Retry-After`` seconds when the site
        sent one. A 403/503 block page is re-typed ``blocked`` (retryable, rotates the proxy)."""
        ban = bans.classify_error(exc)
        if proxy is not None:
            await health.record_verdict(
                session,
                proxy.proxy_id,
                health.verdict(exc.error_type, ban=ban),
                domain_id=domain_id,
                response_ms=None,
                settings=self.settings,
            )
            await self.release(session, proxy)
        return await self.failed(session, domain_id, exc, direct=proxy is None)

    async def release(self, session: AsyncSession, proxy: ProxyChoice) -> None:
        """End ``proxy``'s exclusive lease, if it has one."""
        if proxy.lease_owner is not None:
            await release_proxy(session, proxy.proxy_id, proxy.lease_owner)

    async def answered(self, session: AsyncSession, domain_id: int, elapsed_ms: int) -> None:
        """The site answered one fetch in ``elapsed_ms``: it is up, and maybe slow."""
        await self._breaker(session, domain_id, ok=True)
        await throttle.on_response(session, domain_id, self.settings, elapsed_ms)

    async def failed(
        self, session: AsyncSession, domain_id: int, exc: FetchError, *, direct: bool
    ) -> float | None:
        """One failed fetch (``direct``: through no proxy); ``Retry-After`` seconds when the
        site sent one."""
        site = effect(exc.error_type).site_breaker
        if site == "fail" or (site == "fail_direct" and direct):
            await self._breaker(session, domain_id, ok=False)
        elif site == "ok":  # the site answered: it is up
            await self._breaker(session, domain_id, ok=True)
        if exc.status_code not in throttle.OVERLOAD_STATUSES:
            return None
        headers = getattr(exc, "headers", {}) or {}
        retry_after = throttle.retry_after_seconds(headers)
        await throttle.on_overload(session, domain_id, self.settings, retry_after)
        return retry_after

    async def answered_many(
        self, session: AsyncSession, outcomes: Sequence[tuple[int, int]]
    ) -> None:
        """Many fetches that got an answer, as (domain id, response ms): per batch, one breaker
        statement (state and success count of each domain of the batch, transitions read back
        with ``RETURNING``) and a throttle step only for domains being throttled or answering
        slowly."""
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

    async def _breaker(self, session: AsyncSession, domain_id: int, *, ok: bool) -> None:
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
