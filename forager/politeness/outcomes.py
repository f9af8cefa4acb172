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
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Integer, Table, bindparam, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import breakers
from forager.db.models import Domain
from forager.db.types import UTCDateTime, utcnow
from forager.errors import FetchError, effect
from forager.politeness import bans, gate, throttle
from forager.proxies import health
from forager.proxies.selection import ProxyChoice, release_proxy

_DOMAINS = cast(Table, Domain.__table__)  # Core, not ORM: the writer's group, every time


def _slots(count: int) -> int:
    """The size of statement that takes ``count`` domains: a power of two, so that a few
    statements, built once, serve every group."""
    return 1 << (count - 1).bit_length()


@dataclass(frozen=True, slots=True)
class Judged:
    """A failed fetch as politeness reads it, before anything is written (``judge``)."""

    ban: bool  # the site refused this client: counts against the proxy for this domain only
    retry_after: float | None  # the site's ``Retry-After`` of a 429 / 503, in seconds


def judge(exc: FetchError) -> Judged:
    """What a failed fetch says, read in the fetch phase with no database: a 403/503 block page
    is re-typed ``blocked`` on ``exc`` (retryable, rotates the proxy), and an overloaded site's
    ``Retry-After`` is the earliest the task may be tried again."""
    ban = bans.classify_error(exc)
    retry_after = None
    if exc.status_code in throttle.OVERLOAD_STATUSES:
        retry_after = throttle.retry_after_seconds(getattr(exc, "headers", {}) or {})
    return Judged(ban, retry_after)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One fetch's outcome to book: through ``proxy`` (None: direct), answered in
    ``answered_ms``, or failed with ``error`` as ``judged``; ``reopen`` is the crawl delay after
    which the domain's gate opens again when the request never left (None: nothing to open)."""

    domain_id: int
    proxy: ProxyChoice | None = None
    answered_ms: int | None = None
    error: FetchError | None = None
    judged: Judged | None = None
    reopen: float | None = None


class Outcomes:
    """One per process's fetch policy; every method runs inside the caller's transaction."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._answered: dict[int, Any] = {}  # answered_many's statements, by size

    async def succeeded(
        self,
        session: AsyncSession,
        domain_id: int,
        proxy: ProxyChoice | None,
        elapsed_ms: int,
    ) -> None:
        """The site answered one fetch in ``elapsed_ms`` (through ``proxy``, if any), booked at
        once (an image download's)."""
        if proxy is None:
            await self.answered(session, domain_id, elapsed_ms)
        else:
            await self.book(session, [Outcome(domain_id, proxy, answered_ms=elapsed_ms)])

    async def failed_through(
        self,
        session: AsyncSession,
        domain_id: int,
        proxy: ProxyChoice | None,
        exc: FetchError,
    ) -> float | None:
        """One failed fetch (through ``proxy``, if any), booked at once (an image download's);
        ``Retry-After`` seconds when the site sent one."""
        judged = judge(exc)
        await self.book(session, [Outcome(domain_id, proxy, error=exc, judged=judged)])
        return judged.retry_after

    async def book(self, session: AsyncSession, outcomes: Sequence[Outcome]) -> None:
        """A group's outcomes, last in the writer's transaction: each proxy is told and its lease
        ended, then the domains — failures and proxied answers one statement each, in domain
        order, direct answers in one statement for the group — and gates still closed reopen.
        The domains' rows come last because a claim skips a locked domain (``SKIP LOCKED``): the
        lock is held until the commit, so taking it last keeps every domain claimable while the
        rest of the group is written."""
        judged = {id(o): o.judged or judge(o.error) for o in outcomes if o.error is not None}
        for outcome in outcomes:
            if outcome.proxy is None:
                continue
            if outcome.error is not None:
                verdict = health.verdict(outcome.error.error_type, ban=judged[id(outcome)].ban)
                elapsed = None
            elif outcome.answered_ms is not None:
                verdict, elapsed = "ok", outcome.answered_ms
            else:
                continue
            await health.record_verdict(
                session,
                outcome.proxy.proxy_id,
                verdict,
                domain_id=outcome.domain_id,
                response_ms=elapsed,
                settings=self.settings,
            )
            await self.release(session, outcome.proxy)
        for outcome in sorted(outcomes, key=lambda o: o.domain_id):
            if outcome.error is not None:
                await self._site_failed(
                    session,
                    outcome.domain_id,
                    outcome.error,
                    judged[id(outcome)],
                    direct=outcome.proxy is None,
                )
            elif outcome.answered_ms is not None and outcome.proxy is not None:
                await self.answered(session, outcome.domain_id, outcome.answered_ms)
        await self.answered_many(
            session,
            [
                (o.domain_id, o.answered_ms)
                for o in outcomes
                if o.answered_ms is not None and o.proxy is None and o.error is None
            ],
        )
        for domain_id, delay in sorted(
            {(o.domain_id, o.reopen) for o in outcomes if o.reopen is not None}
        ):
            await gate.open_after(session, domain_id, delay)

    async def release(self, session: AsyncSession, proxy: ProxyChoice) -> None:
        """End ``proxy``'s exclusive lease, if it has one."""
        if proxy.lease_owner is not None:
            await release_proxy(session, proxy.proxy_id, proxy.lease_owner)

    async def answered(self, session: AsyncSession, domain_id: int, elapsed_ms: int) -> None:
        """The site answered one fetch in ``elapsed_ms``: it is up, and maybe slow."""
        await self._breaker(session, domain_id, ok=True)
        await throttle.on_response(session, domain_id, self.settings, elapsed_ms)

    async def _site_failed(
        self,
        session: AsyncSession,
        domain_id: int,
        exc: FetchError,
        judged: Judged,
        *,
        direct: bool,
    ) -> None:
        """One failed fetch on its domain (``direct``: through no proxy): its breaker, as the
        type's ``site_breaker`` says, and its delay when the site was overloaded."""
        site = effect(exc.error_type).site_breaker
        if site == "fail" or (site == "fail_direct" and direct):
            await self._breaker(session, domain_id, ok=False)
        elif site == "ok":  # the site answered: it is up
            await self._breaker(session, domain_id, ok=True)
        if exc.status_code in throttle.OVERLOAD_STATUSES:
            await throttle.on_overload(session, domain_id, self.settings, judged.retry_after)

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
        now = utcnow()
        params: dict[str, Any] = {
            "b_now": now,
            "b_cutoff": breakers.reopen_cutoff(self.settings, now),
        }
        slots = _slots(len(per_domain))
        for index, (domain_id, count) in enumerate(sorted(per_domain.items())):
            params[f"b_d{index}"], params[f"b_n{index}"] = domain_id, count
        for index in range(len(per_domain), slots):  # padding: an id no row has
            params[f"b_d{index}"], params[f"b_n{index}"] = 0, 0
        rows = (await session.execute(self._answered_statement(slots), params)).all()
        breakers.transitions(session, "domain", rows, now)
        slow_ms = self.settings.throttle_slow_seconds * 1000
        throttled = {row.id for row in rows if row.throttle_delay_seconds is not None}
        for domain_id, elapsed_ms in outcomes:
            if domain_id in throttled or elapsed_ms >= slow_ms:
                await throttle.on_response(session, domain_id, self.settings, elapsed_ms)

    def _answered_statement(self, slots: int) -> Any:
        """``answered_many``'s statement for up to ``slots`` domains, built once per size (its
        times and counts are parameters): the breaker's success on each domain, ``n`` answers
        on its total, read back with whether the domain is being throttled."""
        statement = self._answered.get(slots)
        if statement is None:
            ids = [bindparam(f"b_d{i}", type_=Integer) for i in range(slots)]
            counts = [bindparam(f"b_n{i}", type_=Integer) for i in range(slots)]
            now = bindparam("b_now", type_=UTCDateTime)
            cutoff = bindparam("b_cutoff", type_=UTCDateTime)
            c = _DOMAINS.c
            statement = (
                update(_DOMAINS)
                .where(c.id.in_(ids))
                .values(
                    **breakers.outcome_values(c, self.settings, now, ok=True, cutoff=cutoff),
                    **breakers.tally(c, ok=True, per_id=zip(ids, counts, strict=True)),
                )
                .returning(*breakers.returning(c), c.throttle_delay_seconds)
            )
            self._answered[slots] = statement
        return statement

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
