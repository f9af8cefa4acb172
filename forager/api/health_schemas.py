"""``/health`` and ``/api/stats`` bodies: the queue's and the monitors' health, workers and
circuit breakers seen, and the counts."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class CrawlWorkerSeen(BaseModel):
    """A crawl worker process seen recently, by its process name; not a mission's worker
    service (``/api/worker-services``, whose numeric ids ``worker_id`` filters name)."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: str
    concurrency: int
    in_flight: int
    processed: int
    started_at: datetime
    last_seen_at: datetime
    memory_bytes: int | None = Field(None, description="RSS of its process tree.")
    cpu_percent: float | None = None


class BreakerSeen(BaseModel):
    """A circuit breaker that is not closed (issue 5)."""

    model_config = ConfigDict(from_attributes=True)

    kind: Literal["domain", "proxy"]
    entity_id: int
    name: str
    state: Literal["open", "half_open"]
    failure_count: int
    success_count: int
    opened_at: datetime | None


class ScraperSeen(BaseModel):
    """One running monitor, as the seed's ``ScraperContext.to_dict`` (issue 15)."""

    scraper_id: str | None = None
    match_id: str = Field(description="The monitor's id (the seed's match).")
    monitor_id: int
    url: str
    start_time: datetime
    last_update: datetime | None = Field(None, description="The last successful poll.")
    uptime_seconds: float
    error_count: int = Field(description="Consecutive errors.")
    total_errors: int
    total_updates: int
    health_status: Literal["healthy", "degraded", "failing"]
    memory_mb: float
    cpu_percent: float
    polling_interval: float
    dropped_snapshots: int = Field(
        description="Changes dropped unwritten from a full result queue (all runs)."
    )


class CircuitBreakerSeen(BaseModel):
    """A breaker of a domain, a proxy or a monitor (every one, closed ones too), with the
    seed's statistics."""

    kind: Literal["domain", "proxy", "monitor"]
    entity_id: int
    name: str
    state: Literal["closed", "open", "half_open"]
    failure_count: int
    success_count: int
    opened_at: datetime | None = None
    total_calls: int = Field(description="Outcomes recorded (and, for a monitor, refusals).")
    total_successes: int
    total_failures: int
    total_rejections: int | None = Field(
        None,
        description="Polls refused while open: monitors only (an open domain's or proxy's "
        "work is skipped by the claim, never offered and refused).",
    )
    last_state_change: datetime | None = None


class HealthResources(BaseModel):
    total_memory_mb: float
    average_memory_mb: float
    peak_memory_mb: float
    total_cpu_percent: float
    dropped_snapshots: int = Field(
        description="Changes of enabled monitors dropped unwritten from a full result queue "
        "(FORAGER_MONITOR_MAX_QUEUE_SIZE / _MB), oldest first, never the latest."
    )


class HealthErrors(BaseModel):
    last_minute: int = Field(description="Monitor errors in the last minute.")
    last_hour: int
    circuit_breakers: list[CircuitBreakerSeen]


class HealthPerformance(BaseModel):
    """Recorded successful polls of every enabled monitor over the last one to two minutes."""

    average_latency_ms: float
    p95_latency_ms: float = Field(
        description="Interpolated within its latency histogram bucket (as Prometheus does)."
    )
    updates_per_minute: float = Field(description="Successful polls per minute, recorded.")


class PartHealth(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    status: Literal["healthy", "degraded", "down"]
    detail: str | None = None


class Health(BaseModel):
    """Anonymous callers get ``status``, ``timestamp`` and ``opt_outs``; the rest needs a key."""

    status: Literal["healthy", "degraded", "down"]
    timestamp: datetime = Field(description="When the server answered (UTC).")
    opt_outs: list[str] = Field(
        default_factory=list,
        description="Settings in force that weaken safety, e.g. browser_no_sandbox.",
    )
    database: Literal["ok", "unreachable"] | None = Field(None, description="With an API key.")
    queue_depth: dict[str, int] | None = Field(None, description="Tasks by status.")
    due_tasks: int | None = Field(None, description="Pending tasks whose time has come.")
    workers: list[CrawlWorkerSeen] | None = Field(
        None, description="Worker processes seen recently."
    )
    circuit_breakers: list[BreakerSeen] | None = Field(
        None, description="Domain and proxy circuit breakers that are open or half-open."
    )
    detail: str | None = None
    # The seed's HealthStatus (issue 15), with an API key; status is the worse of the two parts.
    queue: PartHealth | None = Field(None, description="The crawl queue's own health.")
    monitors: PartHealth | None = Field(None, description="The live monitors' own health.")
    active_scraper_count: int | None = None
    total_matches_scraping: int | None = Field(None, description="Enabled monitors.")
    scrapers: list[ScraperSeen] | None = None
    resources: HealthResources | None = None
    errors: HealthErrors | None = None
    performance: HealthPerformance | None = None


class Stats(BaseModel):
    tasks_by_status: dict[str, int]
    products: int
    domains: dict[str, int] = Field(description="Domains by is_active (true/false).")
    proxies: dict[str, int] = Field(description="Proxies by is_active (true/false).")
    fetches_last_hour: dict[str, int] = Field(description="Fetch attempts by outcome.")
    errors_last_hour: dict[str, int] = Field(description="Attempts by error type.")
    workers: list[CrawlWorkerSeen]
