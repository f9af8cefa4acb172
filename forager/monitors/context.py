"""The seed's ``ScraperContext``: one run of one monitor, its restart rules and its health.

Staleness is the age of the last *successful poll* (not of the last change), so a page that
never changes stays healthy. Every rule takes ``now`` so it can be checked without a clock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from forager.config import Settings
from forager.db.types import utcnow
from forager.worker.presence import process_tree_usage

HEALTHY, DEGRADED, FAILING = "healthy", "degraded", "failing"
# The seed's thresholds on consecutive errors: > 2 degraded, > 5 failing.
DEGRADED_ERRORS, FAILING_ERRORS = 2, 5


def health_of(
    error_count: int,
    last_success: datetime | None,
    started: datetime | None,
    now: datetime,
    settings: Settings,
) -> str:
    """``failing`` over 5 consecutive errors or past the staleness threshold (300 s),
    ``degraded`` over 2 errors or past 120 s, else ``healthy``. A run with no success yet is
    as stale as it is old."""
    since = last_success or started or now
    staleness = (now - since).total_seconds()
    if error_count > FAILING_ERRORS or staleness > settings.monitor_staleness_seconds:
        return FAILING
    if error_count > DEGRADED_ERRORS or staleness > settings.monitor_degraded_seconds:
        return DEGRADED
    return HEALTHY


@dataclass
class ScraperContext:
    """Tracks the state and health of one run of a monitor (the seed's fields, ``match_id``
    being the monitor's id). Totals live on the monitor row and survive restarts; this
    context's ``total_*`` count this run only."""

    monitor_id: int
    url: str
    settings: Settings
    scraper_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    start_time: datetime = field(default_factory=utcnow)
    last_update_time: datetime | None = None
    error_count: int = 0
    total_errors: int = 0
    total_updates: int = 0
    health_status: str = HEALTHY
    memory_bytes: int = 0
    cpu_percent: float = 0.0
    browser_pid: int | None = None
    polling_interval: float = 2.5

    @property
    def max_lifetime_seconds(self) -> float:
        return self.settings.monitor_max_lifetime_hours * 3600

    @property
    def soft_memory_limit(self) -> int:
        return self.settings.monitor_memory_soft_limit_mb * 1024 * 1024

    @property
    def hard_memory_limit(self) -> int:
        return self.settings.monitor_memory_hard_limit_mb * 1024 * 1024

    def staleness(self, now: datetime) -> float:
        return (now - (self.last_update_time or self.start_time)).total_seconds()

    def restart_reason(self, now: datetime) -> str | None:
        """Why this run should restart now (lifetime, staleness, errors, memory), or None."""
        if (now - self.start_time).total_seconds() > self.max_lifetime_seconds:
            return "lifetime"
        if self.staleness(now) > self.settings.monitor_staleness_seconds:
            return "staleness"
        if self.error_count > self.settings.monitor_restart_errors:
            return "errors"
        # A run restarts for memory at most once per monitor_memory_restart_min_seconds, so a
        # process that stays above the limit does not restart its monitors every cycle.
        if (
            self.memory_bytes > self.soft_memory_limit
            and (now - self.start_time).total_seconds()
            >= self.settings.monitor_memory_restart_min_seconds
        ):
            return "memory"
        return None

    def should_restart(self, now: datetime | None = None) -> bool:
        return self.restart_reason(now or utcnow()) is not None

    def over_hard_limit(self) -> bool:
        return self.memory_bytes > self.hard_memory_limit

    def get_health_status(self, now: datetime | None = None) -> str:
        now = now or utcnow()
        self.health_status = health_of(
            self.error_count, self.last_update_time, self.start_time, now, self.settings
        )
        return self.health_status

    def record_success(self, now: datetime) -> None:
        self.last_update_time = now
        self.error_count = 0
        self.total_updates += 1

    def record_error(self) -> None:
        self.error_count += 1
        self.total_errors += 1

    def measure(self) -> None:
        """Memory and CPU (since the last measure) of this process and its children: the
        parse processes and Chromium, which is one per process, not one per monitor."""
        self.memory_bytes, self.cpu_percent = process_tree_usage()

    def to_dict(self, now: datetime | None = None) -> dict[str, object]:
        now = now or utcnow()
        return {
            "scraper_id": self.scraper_id,
            "match_id": str(self.monitor_id),
            "url": self.url,
            "start_time": self.start_time.isoformat(),
            "last_update": self.last_update_time.isoformat() if self.last_update_time else None,
            "uptime_seconds": (now - self.start_time).total_seconds(),
            "error_count": self.error_count,
            "total_errors": self.total_errors,
            "total_updates": self.total_updates,
            "health_status": self.get_health_status(now),
            "memory_mb": self.memory_bytes / 1024 / 1024,
            "cpu_percent": self.cpu_percent,
            "polling_interval": self.polling_interval,
        }
