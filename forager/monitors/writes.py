"""Every write of the monitors' runtime: leases (compare-and-set), poll outcomes, snapshots,
errors and health samples. Each function is one short transaction.

A poll's write names the lease (``lease_owner = me``): a process that lost its lease (paused,
deleted, taken over after a stall) writes nothing and stops that monitor.
"""

from __future__ import annotations

import traceback
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, insert, or_, select, update

from forager.alerts import detect
from forager.config import Settings
from forager.db import audit, breakers
from forager.db.engine import Database
from forager.db.models import Monitor, MonitorSnapshot, ScraperError, ScraperHealthLog
from forager.db.types import utcnow
from forager.errors import FetchError, ForagerError, ParseError
from forager.monitors.pending import PendingSnapshot, SnapshotQueue


def _free(now: datetime) -> Any:
    return or_(
        Monitor.lease_owner.is_(None),
        Monitor.lease_expires_at.is_(None),
        Monitor.lease_expires_at < now,
    )


async def _leased_update(session: Any, owner: str, monitor_id: int, **values: Any) -> Any | None:
    """The one shape of every runtime write: ``UPDATE`` the monitor only while ``owner`` holds
    its lease, ``RETURNING`` its breaker (``breakers.returning`` and ``breaker_opened_at``).
    None: the lease is gone and nothing was written."""
    result = await session.execute(
        update(Monitor)
        .where(Monitor.id == monitor_id, Monitor.lease_owner == owner)
        .values(**values)
        .returning(*breakers.returning(Monitor), Monitor.breaker_opened_at)
        .execution_options(synchronize_session=False)
    )
    return result.first()


async def claim(db: Database, owner: str, settings: Settings, limit: int) -> list[Monitor]:
    """Lease up to ``limit`` enabled monitors that nobody holds (or whose lease expired).

    Each is one compare-and-set ``UPDATE … WHERE lease is free``: on PostgreSQL a concurrent
    claimer blocks on the row and re-checks the condition after the first commits, so exactly
    one process wins a monitor; SQLite serializes writers."""
    if limit <= 0:
        return []
    now = utcnow()
    won: list[int] = []
    async with db.session() as session:
        candidates = list(
            await session.scalars(
                select(Monitor.id)
                .where(Monitor.enabled.is_(True), _free(now))
                .order_by(Monitor.id)
                .limit(limit)
            )
        )
        for monitor_id in candidates:
            result = await session.execute(
                update(Monitor)
                .where(Monitor.id == monitor_id, Monitor.enabled.is_(True), _free(now))
                .values(
                    lease_owner=owner,
                    lease_expires_at=now + timedelta(seconds=settings.monitor_lease_seconds),
                )
                .execution_options(synchronize_session=False)
            )
            if getattr(result, "rowcount", 0) == 1:
                won.append(monitor_id)
    if not won:
        return []
    async with db.reader() as session:
        return list(await session.scalars(select(Monitor).where(Monitor.id.in_(won))))


async def renew(db: Database, owner: str, ids: set[int], settings: Settings) -> set[int]:
    """Extend the leases this process still holds on enabled monitors; the ids kept."""
    if not ids:
        return set()
    now = utcnow()
    async with db.session() as session:
        rows = await session.execute(
            update(Monitor)
            .where(Monitor.id.in_(ids), Monitor.lease_owner == owner, Monitor.enabled.is_(True))
            .values(lease_expires_at=now + timedelta(seconds=settings.monitor_lease_seconds))
            .returning(Monitor.id)
            .execution_options(synchronize_session=False)
        )
        return {r[0] for r in rows}


async def release(db: Database, owner: str, monitor_id: int) -> None:
    """Give a monitor back (graceful stop): another process may claim it at once."""
    async with db.session() as session:
        await session.execute(
            update(Monitor)
            .where(Monitor.id == monitor_id, Monitor.lease_owner == owner)
            .values(
                lease_owner=None,
                lease_expires_at=None,
                status=case((Monitor.enabled.is_(True), "stopped"), else_=Monitor.status),
            )
            .execution_options(synchronize_session=False)
        )


async def start_run(
    db: Database, owner: str, monitor_id: int, scraper_id: str, started: datetime, restart: bool
) -> bool:
    """Record a new run (its scraper id and start); ``restart`` counts it. False: lease lost."""
    async with db.session() as session:
        row = await _leased_update(
            session,
            owner,
            monitor_id,
            scraper_id=scraper_id,
            run_started_at=started,
            status="active",
            restarts=Monitor.restarts + (1 if restart else 0),
        )
        ok = row is not None
        if ok and restart:
            audit.record(session, "monitor", [monitor_id], "restarted", {"scraper_id": scraper_id})
        return ok


@dataclass(frozen=True, slots=True)
class Written:
    """What the database says after one outcome: the breaker's state as stored."""

    breaker_state: str
    breaker_opened_at: datetime | None


def category_of(exc: BaseException, fetcher: str) -> str:
    """The seed's error category (network / parsing / browser / database / auth)."""
    if isinstance(exc, FetchError):
        if exc.status_code in (401, 403, 407):
            return "auth"
        return "browser" if fetcher == "browser" else "network"
    if isinstance(exc, ParseError | ValueError | KeyError | TypeError):
        return "parsing"
    if isinstance(exc, TimeoutError | OSError):
        return "network"
    return "database" if type(exc).__module__.startswith(("sqlalchemy", "asyncpg")) else "parsing"


def error_type_of(exc: BaseException) -> str:
    if isinstance(exc, ForagerError):
        return exc.error_type
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "internal"


def _written(session: Any, row: Any, before: str, now: datetime) -> Written:
    """The breaker as stored after an outcome; a transition is logged and recorded."""
    breakers.transitions(session, "monitor", [row], now, before=before)
    return Written(row[1], row[3])


async def record_success(
    db: Database,
    settings: Settings,
    *,
    owner: str,
    monitor_id: int,
    now: datetime,
    queue: SnapshotQueue,
    digest: str,
    latency_ms: int,
    interval: float,
    health: str,
    memory_bytes: int,
    cpu_percent: float,
    breaker_before: str,
    resolution: str | None,
    state: tuple[str | None, str | None] | None = None,
    ended: bool = False,
    latency_buckets: list[int] | None = None,
    latency_sum_ms: int | None = None,
    poll_windows: dict[str, Any] | None = None,
) -> Written | None:
    """One successful poll, and in the same transaction every snapshot waiting in ``queue``
    (this poll's change, if any, is already in it) with the drops not yet counted. A failed
    write gives them back to the queue and raises. None: the lease is gone; nothing of this
    monitor is written (another process polls it now)."""
    values: dict[str, Any] = {
        "total_polls": Monitor.total_polls + 1,
        "total_updates": Monitor.total_updates + 1,
        "consecutive_errors": 0,
        "last_success_at": now,
        "last_latency_ms": latency_ms,
        "current_interval_seconds": interval,
        "next_poll_at": now + timedelta(seconds=interval),
        "health_status": health,
        "status": "active",
        "held_reason": None,
        "memory_bytes": memory_bytes,
        "cpu_percent": cpu_percent,
        "content_hash": digest,
        **breakers.outcome_values(Monitor, settings, now, ok=True),
    }
    if latency_buckets is not None:
        values |= {"latency_buckets": latency_buckets, "latency_sum_ms": latency_sum_ms}
    if poll_windows is not None:
        values["poll_windows"] = poll_windows
    if state is not None:
        values["last_state"] = state[1]
    if ended:
        # An end state stops the monitor: disabled, its lease given back.
        values |= {
            "enabled": False,
            "status": "stopped",
            "lease_owner": None,
            "lease_expires_at": None,
        }
    pending, drops = queue.take(), queue.take_drops()
    own = [p for p in pending if p.monitor_id == monitor_id]
    if own:
        values |= {
            "total_changes": Monitor.total_changes + len(own),
            "last_change_at": max(p.observed_at for p in own),
        }
    if drops[monitor_id]:
        values["dropped_snapshots"] = Monitor.dropped_snapshots + drops.pop(monitor_id)
    try:
        async with db.session() as session:
            written = await _success_write(
                session, owner, monitor_id, values, breaker_before, now, pending, drops
            )
            if written is not None:
                await _success_extras(session, monitor_id, now, resolution, state, ended)
    except BaseException:
        queue.give_back(pending)
        queue.give_back_drops(drops)
        raise
    if written is None:  # the lease is gone: the others' snapshots wait for the next write
        queue.give_back(p for p in pending if p.monitor_id != monitor_id)
        queue.give_back_drops(drops)
    return written


async def _success_write(
    session: Any,
    owner: str,
    monitor_id: int,
    values: dict[str, Any],
    breaker_before: str,
    now: datetime,
    pending: list[PendingSnapshot],
    drops: Counter[int],
) -> Written | None:
    """The poll's row, then everything queued (``_write_pending``)."""
    row = await _leased_update(session, owner, monitor_id, **values)
    if row is None:
        return None
    written = _written(session, row, breaker_before, now)
    await _write_pending(session, pending, drops, counted=monitor_id)
    return written


async def _write_pending(
    session: Any, pending: list[PendingSnapshot], drops: Counter[int], counted: int | None
) -> None:
    """Queued snapshots of monitors that still exist, and the changes and drops they carry
    onto their monitors' counters (but ``counted``'s, already in its own row's write)."""
    others = {p.monitor_id for p in pending} | set(drops)
    others.discard(counted)
    alive = set() if counted is None else {counted}
    if others:
        alive |= set(await session.scalars(select(Monitor.id).where(Monitor.id.in_(others))))
    rows = [p.row() for p in pending if p.monitor_id in alive]
    if rows:
        await session.execute(insert(MonitorSnapshot), rows)
        await detect.snapshots(session, rows)  # monitor_changed rules, in the same transaction
    changes = Counter(p.monitor_id for p in pending if p.monitor_id in alive - {counted})
    ids = sorted((set(changes) | set(drops)) & (alive - {counted}))
    if ids:
        await session.execute(
            update(Monitor)
            .where(Monitor.id.in_(ids))
            .values(
                total_changes=Monitor.total_changes
                + case(dict(changes) or {0: 0}, value=Monitor.id, else_=0),
                dropped_snapshots=Monitor.dropped_snapshots
                + case(dict(drops) or {0: 0}, value=Monitor.id, else_=0),
            )
            .execution_options(synchronize_session=False)
        )


async def flush(db: Database, queue: SnapshotQueue) -> int:
    """Write whatever still waits in ``queue`` (a runner's tick and its graceful stop); the
    number of snapshots written. A failed write gives them back and raises."""
    pending, drops = queue.take(), queue.take_drops()
    if not pending and not drops:
        return 0
    try:
        async with db.session() as session:
            await _write_pending(session, pending, drops, counted=None)
    except BaseException:
        queue.give_back(pending)
        queue.give_back_drops(drops)
        raise
    return len(pending)


async def _success_extras(
    session: Any,
    monitor_id: int,
    now: datetime,
    resolution: str | None,
    state: tuple[str | None, str | None] | None,
    ended: bool,
) -> None:
    """Errors resolved by this success, and its state events."""
    if resolution is not None:
        await session.execute(
            update(ScraperError)
            .where(ScraperError.monitor_id == monitor_id, ScraperError.resolved.is_(False))
            .values(resolved=True, resolution_time=now, resolution_method=resolution)
            .execution_options(synchronize_session=False)
        )
    if state is not None:
        audit.record(
            session,
            "monitor",
            [monitor_id],
            "state_changed",
            {"from": state[0], "to": state[1]},
        )
    if ended:
        audit.record(session, "monitor", [monitor_id], "ended", {"state": state and state[1]})


async def record_failure(
    db: Database,
    settings: Settings,
    *,
    owner: str,
    monitor_id: int,
    scraper_id: str,
    url: str,
    fetcher: str,
    now: datetime,
    exc: BaseException,
    attempt: int,
    interval: float,
    health: str,
    breaker_before: str,
) -> Written | None:
    """One failed poll (or retry): counters, breaker, and a ``scraper_errors`` row."""
    message = str(exc) or type(exc).__name__
    async with db.session() as session:
        row = await _leased_update(
            session,
            owner,
            monitor_id,
            total_polls=Monitor.total_polls + 1,
            total_errors=Monitor.total_errors + 1,
            consecutive_errors=Monitor.consecutive_errors + 1,
            last_error_at=now,
            last_error=message[:2000],
            current_interval_seconds=interval,
            next_poll_at=now + timedelta(seconds=interval),
            health_status=health,
            status="error" if health == "failing" else "active",
            held_reason=None,
            **breakers.outcome_values(Monitor, settings, now, ok=False),
        )
        if row is None:
            return None
        written = _written(session, row, breaker_before, now)
        await session.execute(
            insert(ScraperError).values(
                scraper_id=scraper_id,
                monitor_id=monitor_id,
                timestamp=now,
                error_type=error_type_of(exc),
                category=category_of(exc, fetcher),
                error_message=message[:10_000],
                stack_trace="".join(traceback.format_exception(exc))[-20_000:],
                url=url,
                operation="poll",
                retry_attempt=attempt,
                resolved=False,
            )
        )
        return written


async def record_rejection(db: Database, owner: str, monitor_id: int, interval: float) -> bool:
    """A poll refused by the open breaker: counted, nothing fetched. False: lease lost."""
    now = utcnow()
    async with db.session() as session:
        row = await _leased_update(
            session,
            owner,
            monitor_id,
            breaker_rejections=Monitor.breaker_rejections + 1,
            current_interval_seconds=interval,
            next_poll_at=now + timedelta(seconds=interval),
        )
        return row is not None


async def record_hold(db: Database, owner: str, monitor_id: int, reason: str, wait: float) -> bool:
    """A poll its domain's policy holds back (``monitors.policy``): ``paused`` with the reason,
    nothing fetched, nothing counted. False: lease lost."""
    now = utcnow()
    async with db.session() as session:
        row = await _leased_update(
            session,
            owner,
            monitor_id,
            status="paused",
            held_reason=reason[:300],
            next_poll_at=now + timedelta(seconds=wait),
        )
        return row is not None


async def log_health(db: Database, sample: dict[str, Any]) -> None:
    """One ``scraper_health_log`` row."""
    async with db.session() as session:
        await session.execute(insert(ScraperHealthLog).values(**sample))
