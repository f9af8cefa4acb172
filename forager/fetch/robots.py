"""robots.txt enforcement: fetched on demand, cached in the ``robots_txt_*`` columns, refreshed
after ``FORAGER_ROBOTS_REFRESH_SECONDS`` (a day), parsed once per process and version.

A domain with ``ignore_robots`` skips all of it. When robots.txt cannot be fetched and no
copy is cached, everything is allowed and the fetch is tried again a minute later (a site
whose robots.txt is down is not made uncrawlable; RFC 9309 leaves this to the crawler).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.robotparser import RobotFileParser

from sqlalchemy import select

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Domain
from forager.db.types import utcnow
from forager.domains.service import refresh_robots

_RETRY_FAILED_FETCH = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    fetched: bool  # robots.txt was requested for this check (it used the domain's turn)
    reason: str | None = None


class RobotsRules:
    """Per-process cache of parsed robots.txt files; the database holds the text."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self._parsed: dict[int, tuple[datetime | None, RobotFileParser | None]] = {}
        self._failed_until: dict[int, datetime] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def _load(self, domain_id: int) -> Domain | None:
        async with self.db.reader() as session:
            return await session.scalar(select(Domain).where(Domain.id == domain_id))

    def _stale(self, domain: Domain, now: datetime) -> bool:
        if domain.robots_txt_last_fetched is None:
            return now >= self._failed_until.get(domain.id, now)
        age = now - domain.robots_txt_last_fetched
        return age > timedelta(seconds=self.settings.robots_refresh_seconds)

    async def check(self, domain_id: int, url: str, user_agent: str) -> Verdict:
        """May ``url`` be fetched? Refreshes a missing or day-old robots.txt first."""
        domain = await self._load(domain_id)
        if domain is None or domain.ignore_robots:
            return Verdict(True, False)
        fetched = False
        if self._stale(domain, utcnow()):
            lock = self._locks.setdefault(domain_id, asyncio.Lock())
            async with lock:
                domain = await self._load(domain_id)
                if domain is None:
                    return Verdict(True, False)
                if self._stale(domain, utcnow()):
                    fetched = True
                    domain, error = await refresh_robots(self.db, self.settings, domain_id)
                    if error is not None:
                        self._failed_until[domain_id] = utcnow() + _RETRY_FAILED_FETCH
        parser = self._parser(domain)
        if parser is None or parser.can_fetch(user_agent, url):
            return Verdict(True, fetched)
        return Verdict(False, fetched, f"robots.txt of {domain.domain_name} disallows {url}")

    def _parser(self, domain: Domain) -> RobotFileParser | None:
        cached = self._parsed.get(domain.id)
        if cached is not None and cached[0] == domain.robots_txt_last_fetched:
            return cached[1]
        parser: RobotFileParser | None = None
        if domain.robots_txt_content:
            parser = RobotFileParser()
            parser.parse(domain.robots_txt_content.splitlines())
        self._parsed[domain.id] = (domain.robots_txt_last_fetched, parser)
        return parser
