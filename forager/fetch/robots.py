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


@dataclass(frozen=True, slots=True)
class _RobotsState:
    domain_id: int
    domain_name: str
    ignore_robots: bool
    last_fetched: datetime | None


class RobotsRules:
    """Per-process cache of parsed robots.txt files; the database holds the text."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self._parsed: dict[int, tuple[datetime | None, RobotFileParser | None]] = {}
        self._failed_until: dict[int, datetime] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def _state(self, domain_id: int) -> _RobotsState | None:
        """What every check needs: a few columns, not the robots.txt text (read per page)."""
        async with self.db.reader() as session:
            row = (
                await session.execute(
                    select(
                        Domain.domain_name, Domain.ignore_robots, Domain.robots_txt_last_fetched
                    ).where(Domain.id == domain_id)
                )
            ).one_or_none()
        return None if row is None else _RobotsState(domain_id, *row)

    def _stale(self, state: _RobotsState, now: datetime) -> bool:
        if state.last_fetched is None:
            return now >= self._failed_until.get(state.domain_id, now)
        age = now - state.last_fetched
        return age > timedelta(seconds=self.settings.robots_refresh_seconds)

    async def check(self, domain_id: int, url: str, user_agent: str) -> Verdict:
        """May ``url`` be fetched? Refreshes a missing or day-old robots.txt first."""
        state = await self._state(domain_id)
        if state is None or state.ignore_robots:
            return Verdict(True, False)
        fetched = False
        if self._stale(state, utcnow()):
            lock = self._locks.setdefault(domain_id, asyncio.Lock())
            async with lock:
                state = await self._state(domain_id)
                if state is None:
                    return Verdict(True, False)
                if self._stale(state, utcnow()):
                    fetched = True
                    _, error = await refresh_robots(self.db, self.settings, domain_id)
                    if error is not None:
                        self._failed_until[domain_id] = utcnow() + _RETRY_FAILED_FETCH
                    state = await self._state(domain_id)
                    if state is None:
                        return Verdict(True, fetched)
        parser = await self._parser(state)
        if parser is None or parser.can_fetch(user_agent, url):
            return Verdict(True, fetched)
        return Verdict(False, fetched, f"robots.txt of {state.domain_name} disallows {url}")

    async def _parser(self, state: _RobotsState) -> RobotFileParser | None:
        """The parsed robots.txt, read from the database only when this version is new here."""
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
