"""The monitors package's tables (``forager.monitors``): live monitors, their snapshots,
health samples and errors (issue 15, migration 0013)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base, Timestamped
from forager.db.types import BigId, JsonDoc, UTCDateTime, utcnow


class Monitor(Timestamped, Base):
    """One URL watched continuously; its counters and freshness survive restarts and takeovers.

    ``lease_owner`` / ``lease_expires_at`` spread monitors over processes (compare-and-set);
    the breaker columns follow ``forager.db.breakers`` like domains and proxies do.
    """

    __tablename__ = "monitors"
    __table_args__ = (
        CheckConstraint(
            "fetcher IN ('http', 'impersonate', 'browser')", name="ck_monitors_fetcher"
        ),
        CheckConstraint(
            "status IN ('active', 'stale', 'stopped', 'error', 'paused')",
            name="ck_monitors_status",
        ),
        CheckConstraint(
            "health_status IN ('healthy', 'degraded', 'failing')", name="ck_monitors_health"
        ),
        CheckConstraint(
            "min_interval_seconds <= interval_seconds AND interval_seconds <= max_interval_seconds",
            name="ck_monitors_interval_bounds",
        ),
        Index("idx_monitors_enabled_lease", "enabled", "lease_expires_at"),
        Index("idx_monitors_status", "status"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str | None] = mapped_column(String(100))
    url: Mapped[str] = mapped_column(String(2048))
    fetcher: Mapped[str] = mapped_column(String(20), default="http")
    # Either a registered parser or a selector map ({field: selector}, css or json).
    parser_name: Mapped[str | None] = mapped_column(String(100))
    selector_type: Mapped[str | None] = mapped_column(String(10))
    selectors: Mapped[dict[str, str] | None] = mapped_column(JsonDoc)
    # State detection: a field whose value is the monitor's state (live / ended, in stock /
    # sold out); a change of it is an event, and reaching one of end_states stops the monitor.
    state_field: Mapped[str | None] = mapped_column(String(64))
    end_states: Mapped[list[str] | None] = mapped_column(JsonDoc)
    last_state: Mapped[str | None] = mapped_column(String(200))
    interval_seconds: Mapped[float] = mapped_column(Float, default=2.5)
    min_interval_seconds: Mapped[float] = mapped_column(Float)
    max_interval_seconds: Mapped[float] = mapped_column(Float)
    current_interval_seconds: Mapped[float] = mapped_column(Float)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(10), default="stopped")
    health_status: Mapped[str] = mapped_column(String(10), default="healthy")
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    next_poll_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The current run (ScraperContext): a new id and start time on every (re)start.
    scraper_id: Mapped[str | None] = mapped_column(String(36))
    run_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    total_polls: Mapped[int] = mapped_column(BigInteger, default=0)
    total_updates: Mapped[int] = mapped_column(BigInteger, default=0)
    total_changes: Mapped[int] = mapped_column(BigInteger, default=0)
    total_errors: Mapped[int] = mapped_column(BigInteger, default=0)
    consecutive_errors: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    breaker_state: Mapped[str] = mapped_column(String(10), default="closed")
    breaker_failures: Mapped[int] = mapped_column(Integer, default=0)
    breaker_successes: Mapped[int] = mapped_column(Integer, default=0)
    breaker_opened_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    breaker_rejections: Mapped[int] = mapped_column(BigInteger, default=0)
    breaker_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    content_hash: Mapped[str | None] = mapped_column(String(64))
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_change_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_latency_ms: Mapped[int | None] = mapped_column(Integer)
    # Successful polls by latency (forager.monitors.window.LATENCY_BUCKETS, then +Inf), kept
    # by the one process holding the lease; /metrics makes a histogram of them.
    latency_buckets: Mapped[list[int] | None] = mapped_column(JsonDoc)
    latency_sum_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    # Snapshots dropped unwritten from a full result queue (seed MAX_QUEUE_SIZE; issue 15).
    dropped_snapshots: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # The last minute or two of successful polls (forager.monitors.window), for /health.
    poll_windows: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    cpu_percent: Mapped[float | None] = mapped_column(Float)
    # Why it does not poll now (migration 0030, forager.monitors.policy): its domain switched
    # off, robots.txt, no proxy, the domain's turn; None once a poll goes out.
    held_reason: Mapped[str | None] = mapped_column(String(300))


class MonitorSnapshot(Base):
    """One observed state of a monitor's data: written only when it differs from the last."""

    __tablename__ = "monitor_snapshots"
    __table_args__ = (Index("idx_monitor_snapshots_monitor", "monitor_id", "observed_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    monitor_id: Mapped[int] = mapped_column(ForeignKey("monitors.id", ondelete="CASCADE"))
    data: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    content_hash: Mapped[str] = mapped_column(String(64))
    observed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    scraper_id: Mapped[str | None] = mapped_column(String(36))
    update_latency_ms: Mapped[int | None] = mapped_column(Integer)
    data_source: Mapped[str] = mapped_column(String(50), default="scraper")


class ScraperHealthLog(Base):
    """A periodic health sample of one monitor's run (seed: scraper_health_log)."""

    __tablename__ = "scraper_health_log"
    __table_args__ = (
        Index("idx_health_scraper_timestamp", "scraper_id", "timestamp"),
        Index("idx_health_monitor_timestamp", "monitor_id", "timestamp"),
        Index("idx_health_status", "health_status", "timestamp"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    scraper_id: Mapped[str] = mapped_column(String(36))
    monitor_id: Mapped[int | None] = mapped_column(BigId)
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    health_status: Mapped[str] = mapped_column(String(20))
    error_count: Mapped[int] = mapped_column(Integer, default=0)
    memory_mb: Mapped[float | None] = mapped_column(Float)
    cpu_percent: Mapped[float | None] = mapped_column(Float)
    update_latency_ms: Mapped[int | None] = mapped_column(Integer)
    polling_interval_seconds: Mapped[float | None] = mapped_column(Float)
    uptime_seconds: Mapped[int | None] = mapped_column(Integer)
    last_update_age_seconds: Mapped[int | None] = mapped_column(Integer)
    # start | sample | restart | stop (why the row was written)
    event: Mapped[str | None] = mapped_column(String(20))


class ScraperError(Base):
    """One error of a monitor's run, with its resolution once it recovers (seed: scraper_errors)."""

    __tablename__ = "scraper_errors"
    __table_args__ = (
        CheckConstraint(
            "category IN ('network', 'parsing', 'browser', 'database', 'auth')",
            name="ck_scraper_errors_category",
        ),
        CheckConstraint(
            "resolution_method IS NULL OR resolution_method IN "
            "('auto_retry', 'circuit_breaker', 'manual', 'restart')",
            name="ck_scraper_errors_resolution",
        ),
        Index("idx_errors_scraper_timestamp", "scraper_id", "timestamp"),
        Index("idx_errors_monitor", "monitor_id", "resolved"),
        Index("idx_errors_type", "error_type", "timestamp"),
        Index("idx_errors_unresolved", "resolved", "timestamp"),
        Index("idx_errors_timestamp", "timestamp"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    scraper_id: Mapped[str] = mapped_column(String(36))
    monitor_id: Mapped[int | None] = mapped_column(BigId)
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    error_type: Mapped[str] = mapped_column(String(50))  # Forager's closed error types
    category: Mapped[str] = mapped_column(String(20))  # the seed's: network/parsing/browser/…
    error_message: Mapped[str | None] = mapped_column(Text)
    stack_trace: Mapped[str | None] = mapped_column(Text)
    url: Mapped[str | None] = mapped_column(String(2048))
    operation: Mapped[str | None] = mapped_column(String(100))
    retry_attempt: Mapped[int] = mapped_column(Integer, default=0)
    resolved: Mapped[bool] = mapped_column(Boolean, default=False)
    resolution_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    resolution_method: Mapped[str | None] = mapped_column(String(50))
