"""A monitor's poll under its domain's policy (issue 33): the kill switch, robots.txt, the
politeness gate (crawl delay and concurrency), proxies and the request profile, through the
same operations a task's fetch uses — ``worker.policy.FetchPolicy`` (robots.txt, proxy choice,
outcome bookkeeping), ``politeness.gate`` (the domain's turn, as an image download takes it)
and ``domains.profile`` (headers, cookies, user agent).

The domain is the row whose ``domain_name`` is the monitor URL's host. A monitor of a host
with no domain row has no policy to follow and polls as before (with Forager's user agent);
add the domain to give it one. ``turn`` answers either a ``Turn`` (the request to send, the
proxy, and what to book afterwards) or a ``Hold``: the reason the monitor does not poll now
and when to look again — shown on the monitor (``held_reason``, status ``paused``) and lifted
by itself when the domain allows a poll again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from sqlalchemy import func, select

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import CrawlTask, Domain
from forager.db.types import utcnow
from forager.domains.profile import open_profile
from forager.errors import FetchError
from forager.fetch.base import Fetcher, FetchRequest
from forager.politeness.gate import open_after, take
from forager.politeness.throttle import effective_delay
from forager.proxies.selection import DomainPolicy, NoProxyAvailable, ProxyChoice
from forager.queue.lifecycle import FETCHING
from forager.worker.policy import FetchPolicy

# How long a held monitor waits at most before it looks again (else its interval).
_HOLD_SECONDS = 5.0
# The longest a poll waits for the domain's turn before it is held back (``crawl_delay``).
_TURN_WAIT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Hold:
    """The monitor does not poll now: ``reason`` (``kind: words``), look again in ``seconds``."""

    reason: str
    seconds: float


@dataclass(frozen=True, slots=True)
class PolledAs:
    """The monitor's poll as the fetch policy sees a task (``worker.policy.PolicyTask``)."""

    id: int
    domain_id: int
    url: str
    user_agent: str
    ignore_robots: bool
    domain_name: str
    robots_fetched_at: datetime | None


@dataclass(slots=True)
class Turn:
    """The monitor may poll: send ``request``; then ``succeeded`` or ``failed`` books it."""

    request: FetchRequest
    job: PolledAs | None = None
    proxy: ProxyChoice | None = None
    delay: float = 0.0
    opened: bool = False


class MonitorPolicy:
    """One per monitor runner (its owner is the proxies' lease owner, with the monitor id)."""

    def __init__(
        self, db: Database, settings: Settings, box: SecretBox, fetcher: Fetcher, owner: str
    ) -> None:
        self.db, self.settings, self.box = db, settings, box
        self.fetch = FetchPolicy(db, settings, box, f"{owner}:monitor", fetcher=fetcher)

    async def turn(self, monitor_id: int, url: str, fetcher: str) -> Turn | Hold:
        """What the domain says about polling ``url`` now."""
        host = (urlsplit(url).hostname or "").lower()
        async with self.db.reader() as session:
            domain = await session.scalar(select(Domain).where(Domain.domain_name == host))
        if domain is None:  # no domain, no policy: as before issue 33
            return Turn(FetchRequest(url, self.settings.user_agent, fetcher=fetcher))
        if not domain.is_active:
            return Hold(f"domain_inactive: domain {host} is switched off (its kill switch)", 0)
        job = PolledAs(
            monitor_id,
            domain.id,
            url,
            domain.user_agent,
            bool(domain.ignore_robots),
            domain.domain_name,
            domain.robots_txt_last_fetched,
        )
        verdict = await self.fetch.robots(job)
        if not verdict.allowed:
            why = verdict.reason or "robots.txt disallows this URL"
            return Hold(f"robots: {why}", verdict.retry_in or 0)
        delay = effective_delay(domain.crawl_delay_seconds, domain.throttle_delay_seconds)
        if verdict.fetched and delay > 0:
            await asyncio.sleep(delay)  # robots.txt took the domain's turn, as for a page
        hold = await self._take_turn(domain, delay)
        if hold is not None:
            return hold
        turn = Turn(FetchRequest(url, domain.user_agent, fetcher=fetcher), job, None, delay)
        try:
            async with self.db.session() as session:
                turn.proxy = await self.fetch.choose(session, job, DomainPolicy.of(domain))
        except NoProxyAvailable as exc:
            await self.sent(turn)
            return Hold(f"no_proxy: {exc.message}", exc.retry_in or 0)
        shopper = open_profile(domain.request_profile, None, self.box)
        turn.request = FetchRequest(
            url,
            shopper.user_agent or domain.user_agent,
            turn.proxy.url if turn.proxy else None,
            headers=shopper.headers,
            cookies=shopper.cookies,
            fetcher=fetcher,
            on_sent=lambda: self.sent(turn),
        )
        return turn

    async def _take_turn(self, domain: Domain, delay: float) -> Hold | None:
        """The domain's concurrency and crawl delay: its in-flight tasks leave room, and the
        gate is taken (closed until the request is sent, reopened ``delay`` later), waiting
        for it up to ``_TURN_WAIT_SECONDS`` as an image download does."""
        async with self.db.reader() as session:
            in_flight = await session.scalar(
                select(func.count())
                .select_from(CrawlTask)
                .where(CrawlTask.domain_id == domain.id, CrawlTask.status.in_(FETCHING))
            )
        if (in_flight or 0) >= domain.max_concurrent_requests:
            return Hold(
                f"concurrency: {in_flight} requests of the domain in flight "
                f"(max_concurrent_requests {domain.max_concurrent_requests})",
                0,
            )
        if delay <= 0:
            return None
        waited = 0.0
        while True:
            async with self.db.session() as session:
                opens = await take(session, domain.id, self.settings.monitor_page_timeout_seconds)
            if opens is None:
                return None
            pause = max(0.01, (opens - utcnow()).total_seconds())
            if waited + pause > _TURN_WAIT_SECONDS:
                return Hold(
                    f"crawl_delay: the domain's next request leaves in {pause:.1f} s", pause
                )
            waited += pause
            await asyncio.sleep(pause)

    async def sent(self, turn: Turn) -> None:
        """The request is on the wire (or will not leave): the domain's gate reopens after its
        delay, once."""
        if turn.job is None or turn.delay <= 0 or turn.opened:
            return
        turn.opened = True
        async with self.db.session() as session:
            await open_after(session, turn.job.domain_id, turn.delay)

    async def succeeded(self, turn: Turn, elapsed_ms: int) -> None:
        if turn.job is None:
            return
        await self.sent(turn)
        async with self.db.session() as session:
            await self.fetch.succeeded(session, turn.job, turn.proxy, elapsed_ms)

    async def failed(self, turn: Turn, exc: BaseException) -> None:
        if turn.job is None:
            return
        await self.sent(turn)
        async with self.db.session() as session:
            if isinstance(exc, FetchError):
                await self.fetch.failed(session, turn.job, turn.proxy, exc)
            elif turn.proxy is not None:  # no answer to book (the poll's own timeout)
                await self.fetch.outcomes.release(session, turn.proxy)

    @staticmethod
    def wait_of(hold: Hold, interval: float) -> float:
        """How long a held monitor waits before it asks again."""
        return max(hold.seconds, min(interval, _HOLD_SECONDS), 0.05)
