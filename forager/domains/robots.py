"""robots.txt, all of it: fetching, parsing (RFC 9309), caching and enforcement.

robots.txt is fetched through the fetcher port like a page: the domain's fetcher (``impersonate``
for a ``browser`` domain: a text file needs no rendering), through the domain's proxy choice,
under the egress policy (its host is the domain's own; a redirect into a private address is
refused under ``submitted``), with bodies bounded and cut at ``ROBOTS_MAX_BYTES`` on a line
boundary (RFC 9309 lets a crawler stop at 500 KiB), and with the domain's request profile
(headers, cookies, user agent: a shop may answer robots.txt only to a shopper's cookie). The
text is kept in the ``robots_txt_*`` columns, refreshed after
``FORAGER_ROBOTS_REFRESH_SECONDS`` (a day), parsed once per process and version, and returned
by the domains API: it is the site's public text, and the egress check means it can only come
from where a page of the domain could.

The rules are read by Protego (Scrapy's parser), which follows RFC 9309 where the stdlib's
``urllib.robotparser`` does not: the longest matching rule wins (``Allow`` on a tie), ``*`` and
``$`` are patterns, the group of the crawler's product token (case-insensitive) replaces the
``*`` group and groups naming the same agent are merged; ``Crawl-delay`` may be fractional. The
file's ``Sitemap:`` lines are kept with the domain (``robots_txt_sitemaps``) each time it is read.

A domain with ``ignore_robots`` skips all of it. A robots.txt answered with 4xx allows everything
(RFC 9309 "unavailable"). One the site fails to serve (5xx, a network error or timeout: RFC 9309
"unreachable", the types marked ``robots_unreachable`` in ``forager.errors.EFFECTS``) allows
nothing while no copy is cached: the check says when to ask again (a minute later, when the fetch
is tried again) and the task's try fails as that fetch did (``network``, ``http_5xx``,
``timeout``), retried with back-off no sooner than that, so a dead site's tasks end
failed after their retries; with a cached copy, the copy is used meanwhile. A failure that is
not the site's (its proxy failed, none is free, the egress policy refused a redirect) leaves a
cached copy in force or, without one, allows everything, and the fetch is tried again a minute
later: the page's own fetch meets that failure and reports it (a proxy's health learns from page
fetches, not from robots.txt).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from protego import Protego
from sqlalchemy import select

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import Domain
from forager.db.queries import get_or_not_found
from forager.db.types import utcnow
from forager.domains.profile import open_profile
from forager.errors import FetchError, HTTPStatusError, NotFound, effect
from forager.fetch.base import Fetcher, FetchRequest
from forager.fetch.fetcher_set import for_files
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
    """A fetched robots.txt: its text (empty when the site has none) or why it failed, and
    whether the failure was the site's (``unreachable``)."""

    url: str
    content: str | None = None
    status_code: int | None = None
    error: str | None = None
    error_type: str | None = None

    @property
    def unreachable(self) -> bool:
        return effect(self.error_type).robots_unreachable


async def _fetch(
    fetcher: Fetcher, domain: Domain, proxy_url: str | None, box: SecretBox
) -> RobotsFetch:
    url = f"{domain.base_url.rstrip('/')}/robots.txt"
    kind = for_files(domain.fetcher, domain.auto_fetcher)
    # The domain's request profile, as its pages get it: a shop may gate robots.txt on it.
    shopper = open_profile(domain.request_profile, None, box)
    request = FetchRequest(
        url,
        shopper.user_agent or domain.user_agent,
        proxy_url,
        headers=shopper.headers,
        cookies=shopper.cookies,
        fetcher=kind,
        truncate_at=ROBOTS_MAX_BYTES,
    )
    try:
        response = await fetcher.fetch(request)
    except HTTPStatusError as exc:
        if exc.status_code is not None and 400 <= exc.status_code < 500:
            return RobotsFetch(url, "", exc.status_code)  # RFC 9309: unavailable, all allowed
        return RobotsFetch(
            url, status_code=exc.status_code, error=exc.message, error_type=exc.error_type
        )
    except FetchError as exc:
        error = f"{exc.error_type}: {exc.message}"
        return RobotsFetch(url, error=error, error_type=exc.error_type)
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
        return await _fetch(fetcher, domain, proxy.url if proxy else None, box)
    finally:
        if proxy is not None and proxy.lease_owner is not None:
            async with db.session() as session:
                await release_proxy(session, proxy.proxy_id, proxy.lease_owner)


# RFC 9309 2.2.1: a crawler's product token is made of letters, "_" and "-" only.
_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]+")


def product_token(user_agent: str) -> str:
    """The name robots.txt groups are matched against: ``Forager`` for ``Forager/0.1 (...)``.

    Empty when the user agent does not start with one: only the ``*`` group applies then.
    """
    match = _PRODUCT_TOKEN.match(user_agent.strip())
    return match.group() if match else ""


def parse(content: str) -> Protego:
    """The rules of a robots.txt (RFC 9309)."""
    return Protego.parse(content)


def allows(rules: Protego, url: str, user_agent: str) -> bool:
    """May ``user_agent`` fetch ``url``? The longest matching rule of its group decides."""
    return rules.can_fetch(url, product_token(user_agent))


def crawl_delay(rules: Protego, user_agent: str) -> float | None:
    """The ``Crawl-delay`` of ``user_agent``'s group, if any, capped at an hour."""
    delay = rules.crawl_delay(product_token(user_agent))
    return None if delay is None else min(delay, MAX_CRAWL_DELAY_SECONDS)


def sitemaps(rules: Protego) -> list[str]:
    """The file's ``Sitemap:`` URLs, in order, once each; only absolute http(s) URLs."""
    web = ("http://", "https://")
    return list(dict.fromkeys(u for u in rules.sitemaps if u.lower().startswith(web)))


async def _domain(db: Database, domain_id: int) -> Domain:
    async with db.reader() as session:
        return await get_or_not_found(
            session, Domain, domain_id, f"domain {domain_id} does not exist"
        )


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
    domain, fetched = await _refresh(db, settings, domain_id, fetcher=fetcher, box=box)
    return domain, fetched.error


async def _refresh(
    db: Database, settings: Settings, domain_id: int, *, fetcher: Fetcher, box: SecretBox
) -> tuple[Domain, RobotsFetch]:
    """``refresh_robots``, returning what the fetch found (its failure kept whole)."""
    domain = await _domain(db, domain_id)
    fetched = await _fetch_for(db, settings, domain, fetcher, box)
    async with db.session() as session:
        domain = await get_or_not_found(
            session,
            Domain,
            domain_id,
            f"domain {domain_id} does not exist",
            with_for_update=True,
            populate_existing=True,
        )
        if fetched.content is None:
            failure = {"url": fetched.url, "error": fetched.error}
            audit.record(session, "domain", [domain_id], "robots_refresh_failed", failure)
            return domain, fetched
        rules = parse(fetched.content)
        domain.robots_txt_url = fetched.url
        domain.robots_txt_content = fetched.content
        domain.robots_txt_sitemaps = sitemaps(rules)
        domain.robots_txt_last_fetched = utcnow()
        details: dict[str, Any] = {"url": fetched.url, "status_code": fetched.status_code}
        delay = crawl_delay(rules, domain.user_agent)
        if delay is not None and delay > domain.crawl_delay_seconds:
            details["crawl_delay_seconds"] = {"from": domain.crawl_delay_seconds, "to": delay}
            domain.crawl_delay_seconds = delay
        await session.flush()
        audit.record(session, "domain", [domain_id], "robots_refreshed", details)
    return await _domain(db, domain_id), fetched


# -- enforcement ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    fetched: bool  # robots.txt was requested for this check (it used the domain's turn)
    reason: str | None = None
    # Not allowed *yet*: robots.txt is unreachable and nothing is cached (RFC 9309: assume
    # complete disallow). Ask again this many seconds later; the URL is not refused, its
    # try fails as the robots.txt fetch did (``error_type``) and is retried as such.
    retry_in: float | None = None
    error_type: str | None = None


@dataclass(frozen=True, slots=True)
class _Failure:
    """A failed fetch of a domain's robots.txt, not tried again before ``until``."""

    until: datetime
    error: str
    error_type: str | None

    @property
    def unreachable(self) -> bool:
        """The site's failure, not the proxy's or the egress policy's."""
        return effect(self.error_type).robots_unreachable


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
        self._parsed: dict[int, tuple[datetime | None, Protego | None]] = {}
        # A failed fetch: not tried again before ``until``.
        self._failed: dict[int, _Failure] = {}
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
        failed = self._failed.get(state.domain_id)
        if failed is not None and now < failed.until:
            return False  # tried a moment ago: not again, with or without a cached copy
        if state.last_fetched is None:
            return True
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
        failed = self._failed.get(domain_id)
        if state.last_fetched is None and failed is not None and failed.unreachable:
            # RFC 9309 2.3.1.4: nothing is allowed until robots.txt is read; with no copy to
            # fall back on, the URL waits for the next fetch (it is not refused).
            reason = f"robots.txt of {state.domain_name} unreachable: {failed.error}"
            wait = max((failed.until - utcnow()).total_seconds(), 1.0)
            return Verdict(False, fetched, reason, wait, failed.error_type)
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
                _, got = await _refresh(
                    self.db, self.settings, domain_id, fetcher=self.fetcher, box=self.box
                )
            except NotFound:
                return None, True
            if got.error is None:
                self._failed.pop(domain_id, None)
            else:
                until = utcnow() + _RETRY_FAILED_FETCH
                self._failed[domain_id] = _Failure(until, got.error, got.error_type)
            return await self._state(domain_id), True

    @staticmethod
    def _verdict(
        state: RobotsState,
        rules: Protego | None,
        url: str,
        user_agent: str,
        fetched: bool,
    ) -> Verdict:
        if rules is None or allows(rules, url, user_agent):
            return Verdict(True, fetched)
        return Verdict(False, fetched, f"robots.txt of {state.domain_name} disallows {url}")

    async def _parser(self, state: RobotsState) -> Protego | None:
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
            rules = parse(text) if text else None
            self._parsed[state.domain_id] = (state.last_fetched, rules)
            return rules
