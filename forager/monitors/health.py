"""The seed's ``HealthStatus`` blocks for monitors, read from the database so it covers every
process: scrapers, resources, errors (last minute / hour, breakers), performance, and the
monitors' own status by the seed's rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import breakers
from forager.monitors import admin, window
from forager.monitors.context import HEALTHY, health_of

# The seed's error rates (per minute): 5-10 is degraded, over 10 is down.
DEGRADED_ERRORS_PER_MINUTE, DOWN_ERRORS_PER_MINUTE = 5, 10


@dataclass
class MonitorHealth:
    status: str  # healthy | degraded | down
    detail: str | None
    enabled: int
    scrapers: list[dict[str, Any]] = field(default_factory=list)
    resources: dict[str, float | int] = field(default_factory=dict)
    errors: dict[str, Any] = field(default_factory=dict)
    performance: dict[str, float] = field(default_factory=dict)


def status_of(
    enabled: int, running: int, unhealthy: int, last_minute: int
) -> tuple[str, str | None]:
    """The seed's rules: ``down`` with no active scraper (only while a monitor is enabled: a
    server watching nothing is not down) or more than 10 errors a minute; ``degraded`` when
    some scrapers are stale or failing, or an enabled monitor has no process running it yet
    (it is as stale as one can be), or 5-10 errors a minute; else ``healthy``."""
    if last_minute > DOWN_ERRORS_PER_MINUTE:
        return "down", f"{last_minute} monitor errors in the last minute"
    if enabled and not running:
        return "down", f"{enabled} monitors are enabled but no process is running any of them"
    waiting = enabled - running
    if unhealthy or waiting or last_minute >= DEGRADED_ERRORS_PER_MINUTE:
        return "degraded", (
            f"{unhealthy} monitors stale or failing, {waiting} enabled but not running, "
            f"{last_minute} errors in the last minute"
        )
    return "healthy", None


async def summary(session: AsyncSession, settings: Settings, now: datetime) -> MonitorHealth:
    monitors = await admin.enabled_monitors(session)
    running = [m for m in monitors if admin.is_running(m, now)]
    scrapers: list[dict[str, Any]] = []
    breakers_seen: list[dict[str, Any]] = []
    memory: list[float] = []
    cpu = 0.0
    unhealthy = 0
    for m in running:
        health = health_of(m.consecutive_errors, m.last_success_at, m.run_started_at, now, settings)
        unhealthy += health != HEALTHY
        mb = (m.memory_bytes or 0) / 1024 / 1024
        memory.append(mb)
        cpu += m.cpu_percent or 0.0
        started = m.run_started_at or now
        scrapers.append(
            {
                "scraper_id": m.scraper_id,
                "match_id": str(m.id),
                "monitor_id": m.id,
                "url": m.url,
                "start_time": started,
                "last_update": m.last_success_at,
                "uptime_seconds": round((now - started).total_seconds(), 1),
                "error_count": m.consecutive_errors,
                "total_errors": m.total_errors,
                "total_updates": m.total_updates,
                "health_status": health,
                "memory_mb": round(mb, 1),
                "cpu_percent": m.cpu_percent or 0.0,
                "polling_interval": m.current_interval_seconds,
                "dropped_snapshots": m.dropped_snapshots,
            }
        )
    for m in monitors:
        breakers_seen.append(
            {
                "kind": "monitor",
                "entity_id": m.id,
                "name": m.name or f"monitor {m.id}",
                "state": breakers.effective_state(
                    m.breaker_state, m.breaker_opened_at, settings, now
                ),
                "failure_count": m.breaker_failures,
                "success_count": m.breaker_successes,
                "opened_at": m.breaker_opened_at,
                "total_calls": m.total_polls + m.breaker_rejections,
                "total_successes": m.total_updates,
                "total_failures": m.total_errors,
                "total_rejections": m.breaker_rejections,
                "last_state_change": m.breaker_changed_at,
            }
        )
    last_minute = await admin.errors_since(session, now - timedelta(minutes=1))
    last_hour = await admin.errors_since(session, now - timedelta(hours=1))
    polls = window.recent([m.poll_windows for m in monitors], now)
    status, detail = status_of(len(monitors), len(running), unhealthy, last_minute)
    return MonitorHealth(
        status=status,
        detail=detail,
        enabled=len(monitors),
        scrapers=scrapers,
        resources={
            "total_memory_mb": round(sum(memory), 1),
            "average_memory_mb": round(sum(memory) / len(memory), 1) if memory else 0.0,
            "peak_memory_mb": round(max(memory), 1) if memory else 0.0,
            "total_cpu_percent": round(cpu, 1),
            "dropped_snapshots": sum(m.dropped_snapshots for m in monitors),
        },
        errors={
            "last_minute": last_minute,
            "last_hour": last_hour,
            "monitor_breakers": breakers_seen,
        },
        performance={
            # Recorded successful polls of the last minute or two (``forager.monitors.window``).
            "average_latency_ms": polls.average_latency_ms,
            "p95_latency_ms": polls.p95_latency_ms,
            "updates_per_minute": polls.updates_per_minute,
        },
    )
