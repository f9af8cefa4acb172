"""What a fetch's outcome does to its domain: its circuit breaker and its adaptive delay.

The site's side of every outcome is decided here, in the caller's transaction (the writer's group
commit, an image download's): a failure counts on the domain's breaker as its type's
``site_breaker`` in ``forager.errors.EFFECTS`` says, a 429 or 503 raises the domain's delay and
hands back the site's ``Retry-After``, and an answer is a success on the breaker and a throttle
step. The proxy's side of the same outcome is ``proxies.health``'s (``worker.policy`` asks both).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db.models import Domain
from forager.db.types import utcnow
from forager.errors import FetchError, effect
from forager.politeness import breakers, throttle


class DomainOutcomes:
    """One per fetch policy; every method runs inside the caller's transaction."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

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
