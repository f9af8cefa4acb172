"""Operator actions on monitors (the API's service layer): create, list, pause, resume, delete,
and the reads behind ``/api/monitors/{id}/data`` and ``/health``. Each write is one
transaction with its audit event."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import Monitor, MonitorSnapshot, ScraperError, ScraperHealthLog
from forager.db.queries import get_or_not_found
from forager.db.types import utcnow
from forager.errors import InvalidRequest
from forager.fetch.fetcher_set import FETCHER_KINDS
from forager.monitors.extract import check_spec

STATUSES = ("active", "stale", "stopped", "error", "paused")


@dataclass(frozen=True, slots=True)
class MonitorSpec:
    url: str
    fetcher: str = "http"
    name: str | None = None
    parser_name: str | None = None
    selector_type: str | None = None
    selectors: dict[str, str] | None = None
    interval_seconds: float | None = None
    min_interval_seconds: float | None = None
    max_interval_seconds: float | None = None
    state_field: str | None = None
    end_states: tuple[str, ...] | None = None

    def bounds(self, settings: Settings) -> tuple[float, float, float]:
        """(interval, min, max): the baseline always lies within the bounds, which widen to
        hold it (a minimum above it is lowered to it, a maximum below it raised to it);
        unset values take the settings' defaults. A maximum that would make a monitor
        polling at its slowest look stale is refused, naming the field."""
        low, high = self.min_interval_seconds, self.max_interval_seconds
        base = self.interval_seconds or min(
            max(settings.monitor_interval_seconds, low or 0.0), high or float("inf")
        )
        low = min(low or settings.monitor_min_interval_seconds, base)
        high = max(high or settings.monitor_max_interval_seconds, base)
        if high >= settings.monitor_degraded_seconds:
            field = "max_interval_seconds" if high != base else "interval_seconds"
            raise InvalidRequest(
                f"{field} must be below {settings.monitor_degraded_seconds:g} s "
                "(FORAGER_MONITOR_DEGRADED_SECONDS), or a monitor polling at its slowest "
                "would look stale",
                field=field,
            )
        return base, low, high


async def create(db: Database, settings: Settings, spec: MonitorSpec) -> Monitor:
    if spec.fetcher not in FETCHER_KINDS:
        raise InvalidRequest(f"fetcher must be one of {', '.join(FETCHER_KINDS)}", field="fetcher")
    problem = check_spec(spec.parser_name, spec.selector_type, spec.selectors)
    if problem is not None:
        field = problem.partition(": ")[0].split(".")[0]
        raise InvalidRequest(problem, field=field)
    base, low, high = spec.bounds(settings)
    if spec.end_states and spec.state_field is None:
        raise InvalidRequest("end_states need a state_field", field="end_states")
    async with db.session() as session:
        monitor = Monitor(
            name=spec.name,
            url=spec.url,
            fetcher=spec.fetcher,
            parser_name=spec.parser_name,
            selector_type=spec.selector_type if spec.selectors is not None else None,
            selectors=spec.selectors,
            state_field=spec.state_field,
            end_states=list(spec.end_states) if spec.end_states else None,
            interval_seconds=base,
            min_interval_seconds=low,
            max_interval_seconds=high,
            current_interval_seconds=base,
            enabled=True,
            status="stopped",
            health_status="healthy",
        )
        session.add(monitor)
        await session.flush()
        audit.record(
            session, "monitor", [monitor.id], "created", {"url": spec.url, "fetcher": spec.fetcher}
        )
    return monitor


async def get(session: AsyncSession, monitor_id: int) -> Monitor:
    return await get_or_not_found(session, Monitor, monitor_id, f"monitor {monitor_id} not found")


async def listing(
    session: AsyncSession, *, status: str | None, limit: int, offset: int
) -> tuple[list[Monitor], int]:
    where = [Monitor.status == status] if status else []
    total = await session.scalar(select(func.count()).select_from(Monitor).where(*where)) or 0
    rows = await session.scalars(
        select(Monitor).where(*where).order_by(Monitor.id.desc()).limit(limit).offset(offset)
    )
    return list(rows), total


async def _switch(db: Database, monitor_id: int, *, enable: bool) -> Monitor:
    async with db.session() as session:
        missing = f"monitor {monitor_id} not found"
        monitor = await get_or_not_found(
            session, Monitor, monitor_id, missing, with_for_update=True
        )
        if monitor.enabled != enable:
            # Pausing drops the lease: the process running it writes nothing more and stops it.
            await session.execute(
                update(Monitor)
                .where(Monitor.id == monitor_id)
                .values(
                    enabled=enable,
                    status="stopped" if enable else "paused",
                    held_reason=None,
                    lease_owner=None,
                    lease_expires_at=None,
                )
                .execution_options(synchronize_session=False)
            )
            audit.record(session, "monitor", [monitor_id], "resumed" if enable else "paused")
    async with db.reader() as session:
        return await get(session, monitor_id)


async def pause(db: Database, monitor_id: int) -> Monitor:
    return await _switch(db, monitor_id, enable=False)


async def resume(db: Database, monitor_id: int) -> Monitor:
    return await _switch(db, monitor_id, enable=True)


async def remove(db: Database, monitor_id: int) -> None:
    """Delete a monitor with its snapshots (its errors and health samples stay as history)."""
    async with db.session() as session:
        await get_or_not_found(session, Monitor, monitor_id, f"monitor {monitor_id} not found")
        await session.execute(
            delete(MonitorSnapshot).where(MonitorSnapshot.monitor_id == monitor_id)
        )
        await session.execute(delete(Monitor).where(Monitor.id == monitor_id))
        audit.record(session, "monitor", [monitor_id], "deleted")


async def latest(session: AsyncSession, monitor_id: int) -> tuple[Monitor, MonitorSnapshot | None]:
    monitor = await get(session, monitor_id)
    snapshot = await session.scalar(
        select(MonitorSnapshot)
        .where(MonitorSnapshot.monitor_id == monitor_id)
        .order_by(MonitorSnapshot.id.desc())
        .limit(1)
    )
    return monitor, snapshot


async def history(session: AsyncSession, monitor_id: int, limit: int) -> list[MonitorSnapshot]:
    """The monitor's changes, newest first."""
    await get(session, monitor_id)
    rows = await session.scalars(
        select(MonitorSnapshot)
        .where(MonitorSnapshot.monitor_id == monitor_id)
        .order_by(MonitorSnapshot.id.desc())
        .limit(limit)
    )
    return list(rows)


async def errors_since(session: AsyncSession, since: datetime) -> int:
    return (
        await session.scalar(
            select(func.count()).select_from(ScraperError).where(ScraperError.timestamp >= since)
        )
        or 0
    )


def is_running(monitor: Monitor, now: datetime) -> bool:
    """Leased by a live process (an active scraper in the seed's words)."""
    return (
        monitor.enabled
        and monitor.lease_owner is not None
        and monitor.lease_expires_at is not None
        and monitor.lease_expires_at >= now
    )


async def enabled_monitors(session: AsyncSession) -> list[Monitor]:
    return list(await session.scalars(select(Monitor).where(Monitor.enabled.is_(True))))


async def all_monitors(session: AsyncSession) -> list[Monitor]:
    return list(await session.scalars(select(Monitor).order_by(Monitor.id)))


async def error_listing(
    session: AsyncSession,
    *,
    resolved: bool | None,
    monitor_id: int | None,
    limit: int,
    offset: int,
) -> tuple[list[ScraperError], int]:
    """Scraper errors, newest first (the seed's unresolved index serves ``resolved=false``)."""
    where: list[ColumnElement[bool]] = []
    if resolved is not None:
        where.append(ScraperError.resolved.is_(resolved))
    if monitor_id is not None:
        where.append(ScraperError.monitor_id == monitor_id)
    total = await session.scalar(select(func.count()).select_from(ScraperError).where(*where))
    rows = await session.scalars(
        select(ScraperError)
        .where(*where)
        .order_by(ScraperError.id.desc())
        .limit(limit)
        .offset(offset)
    )
    return list(rows), total or 0


async def resolve_error(db: Database, error_id: int) -> ScraperError:
    """An operator marks an error resolved by hand (``manual``); resolving twice changes
    nothing."""
    async with db.session() as session:
        missing = f"scraper error {error_id} not found"
        error = await get_or_not_found(
            session, ScraperError, error_id, missing, with_for_update=True
        )
        if not error.resolved:
            error.resolved = True
            error.resolution_time = utcnow()
            error.resolution_method = "manual"
            audit.record(session, "scraper_error", [error_id], "resolved", {"method": "manual"})
        return error


async def clean_logs(db: Database, settings: Settings) -> tuple[int, int]:
    """Drop health samples and resolved errors older than the retention; (samples, errors)."""
    cutoff = utcnow() - timedelta(days=settings.monitor_log_retention_days)
    async with db.session() as session:
        samples = await session.execute(
            delete(ScraperHealthLog).where(ScraperHealthLog.timestamp < cutoff)
        )
        errors = await session.execute(
            delete(ScraperError).where(
                ScraperError.resolved.is_(True), ScraperError.timestamp < cutoff
            )
        )
        return getattr(samples, "rowcount", 0) or 0, getattr(errors, "rowcount", 0) or 0
