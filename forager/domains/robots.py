"""robots.txt, all of it: fetching, ``Crawl-delay``, caching and enforcement.

robots.txt is fetched through the fetcher port like a page: the domain's fetcher (``impersonate``
for a ``browser`` domain: a text file needs no rendering), through the domain's proxy choice,
under the egress policy (its host is the domain's own; a redirect into a private address is
refused under ``submitted``), with bodies bounded and cut at ``ROBOTS_MAX_BYTES`` on a line
boundary (RFC 9309 lets a crawler stop at 500 KiB). The text is kept in the ``robots_txt_*``
columns, refreshed after ``FORAGER_ROBOTS_REFRESH_SECONDS`` (a day), parsed once per process
and version, and returned by the domains API: it is the site's public text, and the egress
check means it can only come from where a page of the domain could.

A domain with ``ignore_robots`` skips all of it. When robots.txt cannot be fetched and no copy
is cached, everything is allowed and the fetch is tried again a minute later (a site whose
robots.txt is down is not made uncrawlable; RFC 9309 leaves this to the crawler).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.robotparser import RobotFileParser

from sqlalchemy import select

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import Domain
from forager.db.types import utcnow
from forager.errors import FetchError, HTTPStatusError, NotFound
from forager.fetch.base import Fetcher, FetchRequest
from forager.proxies.selection import (
    DomainPolicy,
    NoProxyAvailable,
    choose_proxy,
    release_proxy,
)

ROBOTS_MAX_BYTES = 512 * 1024
MAX_CRAWL_DELAY_SECONDS = 3600.0
_RETRY_FAILED_FETCH = timedelta(seconds=60)


# -- fetching ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RobotsFetch:
    """A fetched robots.txt: its text (empty when the site has none) or why it failed."""

    url: str
    content: str | None = None
    status_code: int | None = None
    error: str | None = None


async def _fetch(fetcher: Fetcher, domain: Domain, proxy_url: str | None) -> RobotsFetch:
    url = f"{domain.base_url.rstrip('/')}/robots.txt"
    kind = "impersonate" if domain.fetcher == "browser" else domain.fetcher
    request = FetchRequest(
        url, domain.user_agent, proxy_url, fetcher=kind, truncate_at=ROBOTS_MAX_BYTES
    )
    try:
        response = await fetcher.fetch(request)
    except HTTPStatusError as exc:
        if exc.status_code is not None and 400 <= exc.status_code < 500:
            return RobotsFetch(url, "", exc.status_code)  # RFC 9309: unavailable, all allowed
        return RobotsFetch(url, status_code=exc.status_code, error=exc.message)
    except FetchError as exc:
        return RobotsFetch(url, error=f"{exc.error_type}: {exc.message}")
    return RobotsFetch(url, _text(response.body), response.status_code)


def _text(body: bytes) -> str:
    """The body as text; one cut at the size limit loses its last, partial line."""
    if len(body) >= ROBOTS_MAX_BYTES:
        body = body[:ROBOTS_MAX_BYTES].rsplit(b"\n", 1)[0]
    # NUL is no text (and PostgreSQL's text columns refuse it).
    return body.decode("utf-8", errors="replace").replace("\x00", "")


async def _fetch_for(
    db: Database, settings: Settings, domain: Domain, fetcher: Fetcher, box: SecretBox
) -> RobotsFetch:
    """Fetch through the proxy the domain's policy picks now (released right after)."""
    owner = f"robots:{domain.id}"
    try:
        async with db.session() as session:
            proxy = await choose_proxy(session, DomainPolicy.of(domain), settings, box, owner=owner)
    except NoProxyAvailable as exc:
        return RobotsFetch(f"{domain.base_url.rstrip('/')}/robots.txt", error=exc.message)
    try:
        return await _fetch(fetcher, domain, proxy.url if proxy else None)
    finally:
        if proxy is not None and proxy.lease_owner is not None:
            async with db.session() as session:
                await release_proxy(session, proxy.proxy_id, proxy.lease_owner)


def crawl_delay(content: str, user_agent: str) -> float | None:
    """The ``Crawl-delay`` for ``user_agent`` (falling back to ``User-agent: *``), if any."""
    # Parsed here, not by RobotFileParser: it ignores fractional delays ("Crawl-delay: 0.5").
    agent = user_agent.split("/")[0].lower()
    delays: dict[str, float] = {}
    group: list[str] = []
    in_agents = False
    for raw in content.splitlines():
        key, _, value = raw.split("#", 1)[0].partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "user-agent":
            group = group if in_agents else []
            group.append(value.lower())
            in_agents = True
            continue
        in_agents = False
        if key == "crawl-delay":
            try:
                seconds = float(value)
            except ValueError:
                continue
            if not 0 <= seconds < float("inf"):  # nan, negative, inf
                continue
            for name in group:
                delays.setdefault(name, seconds)
    named = [v for k, v in delays.items() if k != "*" and k in agent]
    delay = named[0] if named else delays.get("*")
    return None if delay is None else min(max(delay, 0.0), MAX_CRAWL_DELAY_SECONDS)


async def _domain(db: Database, domain_id: int) -> Domain:
    async with db.reader() as session:
        domain = await session.scalar(select(Domain).where(Domain.id == domain_id))
    if domain is None:
        raise NotFound(f"domain {domain_id} does not exist")
    return domain


async def refresh_robots(
    db: Database,
    settings: Settings,
    domain_id: int,
    *,
    fetcher: Fetcher,
    box: SecretBox,
) -> tuple[Domain, str | None]:
    """Fetch and store robots.txt, raising the crawl delay to its ``Crawl-delay``.

    Returns the domain and, when the fetch failed, why (the stored content is then kept).
    ``fetcher`` and ``box`` are the process's (``Runtime.fetchers``, ``Runtime.box``).
    """
    domain = await _domain(db, domain_id)
    fetched = await _fetch_for(db, settings, domain, fetcher, box)
    async with db.session() as session:
        locked = await session.scalar(
            select(Domain)
            .where(Domain.id == domain_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        if locked is None:
            raise NotFound(f"domain {domain_id} does not exist")
        domain = locked
        if fetched.content is None:
            failure = {"url": fetched.url, "error": fetched.error}
            audit.record(session, "domain", [domain_id], "robots_refresh_failed", failure)
            return domain, fetched.error
        domain.robots_txt_url = fetched.url
        domain.robots_txt_content = fetched.content
        domain.robots_txt_last_fetched = utcnow()
        details: dict[str, Any] = {"url": fetched.url, "status_code": fetched.status_code}
        delay = crawl_delay(fetched.content, domain.user_agent)
        if delay is not None and delay > domain.crawl_delay_seconds:
            details["crawl_delay_seconds"] = {"from": domain.crawl_delay_seconds, "to": delay}
            domain.crawl_delay_seconds = delay
        await session.flush()
        audit.record(session, "domain", [domain_id], "robots_refreshed", details)
    return await _domain(db, domain_id), None


# -- enforcement ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    fetched: bool  # robots.txt was requested for this check (it used the domain's turn)
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class RobotsState:
    """What a check needs of a domain: a few columns, not the robots.txt text."""

    domain_id: int
    domain_name: str
    ignore_robots: bool
    last_fetched: datetime | None


class RobotsRules:
    """Per-process cache of parsed robots.txt files; the database holds the text.

    A (daily) refresh fetches through ``fetcher`` with ``box``: the process's own.
    """

    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        fetcher: Fetcher,
        box: SecretBox,
    ) -> None:
        self.db = db
        self.settings = settings
        self.fetcher = fetcher
        self.box = box
        self._parsed: dict[int, tuple[datetime | None, RobotFileParser | None]] = {}
        self._failed_until: dict[int, datetime] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._read: dict[int, RobotsState] = {}  # each domain's state as last read here

    async def _state(self, domain_id: int) -> RobotsState | None:
        """What every check needs: a few columns, not the robots.txt text (read per page)."""
        async with self.db.reader() as session:
            row = (
                await session.execute(
                    select(
                        Domain.domain_name, Domain.ignore_robots, Domain.robots_txt_last_fetched
                    ).where(Domain.id == domain_id)
                )
            ).one_or_none()
        if row is None:
            self._read.pop(domain_id, None)
            return None
        state = self._read[domain_id] = RobotsState(domain_id, *row)
        return state

    def _newer(self, known: RobotsState) -> RobotsState:
        """``known`` (a claim's view), or this process's own later read of the domain: tasks
        claimed before its robots.txt was first fetched still say "never fetched"."""
        read = self._read.get(known.domain_id)
        if read is None or read.last_fetched is None:
            return known
        if known.last_fetched is None or read.last_fetched > known.last_fetched:
            return read
        return known

    def _lock(self, domain_id: int) -> asyncio.Lock:
        """The domain's lock: one refresh, or one read of a new version, at a time."""
        return self._locks.setdefault(domain_id, asyncio.Lock())

    def _stale(self, state: RobotsState, now: datetime) -> bool:
        if state.last_fetched is None:
            return now >= self._failed_until.get(state.domain_id, now)
        age = now - state.last_fetched
        return age > timedelta(seconds=self.settings.robots_refresh_seconds)

    async def check(
        self, domain_id: int, url: str, user_agent: str, *, known: RobotsState | None = None
    ) -> Verdict:
        """May ``url`` be fetched? Refreshes a missing or day-old robots.txt first.

        ``known`` is the domain's state as the claim read it: when this process has already
        parsed that version of robots.txt and it is not due for a refresh, the check reads
        nothing (the per-page read queued 64 tasks on the read pool: issue 14).
        """
        # The claim read the domain's state just now: no need to read it again. Never fetched,
        # as far as the claim and this process know: the refresh below reads it under its lock,
        # once, not once per task waiting for it.
        state = self._newer(known) if known is not None else await self._state(domain_id)
        if state is None or state.ignore_robots:
            return Verdict(True, False)
        fetched = False
        if self._stale(state, utcnow()):
            fresh, fetched = await self._refreshed(domain_id)
            if fresh is None:  # the domain is gone
                return Verdict(True, fetched)
            state = fresh
        return self._verdict(state, await self._parser(state), url, user_agent, fetched)

    async def _refreshed(self, domain_id: int) -> tuple[RobotsState | None, bool]:
        """The domain's state with its robots.txt fetched, unless another check did it while
        this one waited for the lock; and whether this one fetched it."""
        async with self._lock(domain_id):
            # Refreshed here while this check waited for the lock: no need to read again.
            state = self._read.get(domain_id)
            if state is None or self._stale(state, utcnow()):
                state = await self._state(domain_id)
            if state is None or not self._stale(state, utcnow()):
                return state, False
            try:
                _, error = await refresh_robots(
                    self.db, self.settings, domain_id, fetcher=self.fetcher, box=self.box
                )
            except NotFound:
                return None, True
            if error is not None:
                self._failed_until[domain_id] = utcnow() + _RETRY_FAILED_FETCH
            return await self._state(domain_id), True

    @staticmethod
    def _verdict(
        state: RobotsState,
        parser: RobotFileParser | None,
        url: str,
        user_agent: str,
        fetched: bool,
    ) -> Verdict:
        if parser is None or parser.can_fetch(user_agent, url):
            return Verdict(True, fetched)
        return Verdict(False, fetched, f"robots.txt of {state.domain_name} disallows {url}")

    async def _parser(self, state: RobotsState) -> RobotFileParser | None:
        """The parsed robots.txt, read from the database only when this version is new here."""
        cached = self._parsed.get(state.domain_id)
        if cached is not None and cached[0] == state.last_fetched:
            return cached[1]
        # One read per new version, however many checks wait for it: the tasks a worker
        # claims at start-up all arrive here at once (each read took a connection of its own).
        async with self._lock(state.domain_id):
            cached = self._parsed.get(state.domain_id)
            if cached is not None and cached[0] == state.last_fetched:
                return cached[1]
            async with self.db.reader() as session:
                text = await session.scalar(
                    select(Domain.robots_txt_content).where(Domain.id == state.domain_id)
                )
            parser: RobotFileParser | None = None
            if text:
                parser = RobotFileParser()
                parser.parse(text.splitlines())
            self._parsed[state.domain_id] = (state.last_fetched, parser)
            return parser
