"""One publisher per server process feeds every open dashboard tab.

Every ``INTERVAL`` seconds it runs one short set of queries (tasks by status from the
counters, tasks changed since the last poll, the newest event id, live workers and agents)
and hands the same snapshot to every subscriber; heavier figures (pages per minute over the
last hour, errors by type, proxy health alerts, the alert rules' deliveries of the last day,
open circuit breakers) are refreshed every
``SLOW_INTERVAL``. With no
subscriber it stops, so an idle server does not poll at all. Tabs never query the database
on their own schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.api.proxy_schemas import AlertPublic
from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import (
    Agent,
    AlertDelivery,
    AlertRule,
    CrawlAttempt,
    CrawlTask,
    Domain,
    Event,
)
from forager.db.queries import count_by
from forager.db.types import utcnow
from forager.proxies import health as proxy_health
from forager.queue import counts
from forager.worker.presence import alive_window, live_workers

log = logging.getLogger(__name__)
INTERVAL = 1.0
SLOW_INTERVAL = 10.0
CHANGED_LIMIT = 200
# A transaction may commit a little after a later one was already seen: each poll looks this
# far behind its watermark again, and skips the rows it has already sent.
OVERLAP = timedelta(seconds=2)
MAX_REMEMBERED = 5000
_QUEUE_SIZE = 16
ALERTS_WINDOW = timedelta(days=1)
ALERTS_SHOWN = 5


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


async def _alerts_sent(session: AsyncSession, now: datetime) -> dict[str, Any]:
    """The alert rules' deliveries of the last day (what the Alerts page lists): how many by
    status, and the newest few."""
    since = now - ALERTS_WINDOW
    by_status = await count_by(session, AlertDelivery.status, AlertDelivery.created_at >= since)
    rows = await session.execute(
        select(
            AlertDelivery.id,
            AlertRule.name,
            AlertDelivery.event,
            AlertDelivery.subject_type,
            AlertDelivery.subject_id,
            AlertDelivery.status,
            AlertDelivery.created_at,
        )
        .join(AlertRule, AlertRule.id == AlertDelivery.rule_id)
        .where(AlertDelivery.created_at >= since)
        .order_by(AlertDelivery.created_at.desc(), AlertDelivery.id.desc())
        .limit(ALERTS_SHOWN)
    )
    return {
        "alert_deliveries_last_day": {str(k): v for k, v in by_status.items()},
        "alert_deliveries": [
            {
                "id": r.id,
                "rule": r.name,
                "event": r.event,
                "subject": f"{r.subject_type} {r.subject_id}",
                "status": r.status,
                "created_at": _iso(r.created_at),
            }
            for r in rows
        ],
    }


class Publisher:
    """Polls once per interval for all subscribers; each subscriber gets JSON snapshots."""

    def __init__(self, db: Database, settings: Settings, interval: float = INTERVAL) -> None:
        self.db = db
        self.settings = settings
        self.interval = interval
        self.polls = 0
        self.latest: dict[str, Any] | None = None
        self._subscribers: set[asyncio.Queue[str]] = set()
        self._task: asyncio.Task[None] | None = None
        self._watermark: datetime | None = None
        self._sent: dict[int, datetime] = {}  # task id -> updated_at already published
        self._slow: dict[str, Any] = {}
        self._slow_at = 0.0
        self.closing = asyncio.Event()

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def subscribe(self) -> asyncio.Queue[str]:
        queue: asyncio.Queue[str] = asyncio.Queue(_QUEUE_SIZE)
        if self.latest is not None:
            queue.put_nowait(json.dumps({**self.latest, "changed_tasks": []}))
        self._subscribers.add(queue)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="dashboard publisher")
        return queue

    def unsubscribe(self, queue: asyncio.Queue[str]) -> None:
        self._subscribers.discard(queue)

    def close_streams(self) -> None:
        """Ask every open stream to end (the server is shutting down)."""
        self.closing.set()

    async def stop(self) -> None:
        self.close_streams()
        self._subscribers.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._subscribers:
            started = loop.time()
            try:
                snapshot = await self.poll()
            except Exception as exc:  # a database hiccup must not end the stream
                log.warning("dashboard publisher: poll failed: %s", type(exc).__name__)
                snapshot = None
            if snapshot is not None:
                message = json.dumps(snapshot)
                for queue in list(self._subscribers):
                    if queue.full():  # a stalled tab loses old snapshots, not new ones
                        with contextlib.suppress(asyncio.QueueEmpty):
                            queue.get_nowait()
                    queue.put_nowait(message)
            await asyncio.sleep(max(0.05, self.interval - (loop.time() - started)))

    async def poll(self) -> dict[str, Any]:
        """One snapshot: the same for every tab."""
        self.polls += 1
        now = utcnow()
        loop = asyncio.get_running_loop()
        async with self.db.reader() as session:
            since = (
                now - timedelta(seconds=5) if self._watermark is None else self._watermark - OVERLAP
            )
            rows = (
                await session.execute(
                    select(
                        CrawlTask.id,
                        CrawlTask.status,
                        CrawlTask.priority,
                        CrawlTask.retry_count,
                        CrawlTask.error_type,
                        CrawlTask.updated_at,
                    )
                    .where(CrawlTask.updated_at > since)
                    .order_by(CrawlTask.updated_at)
                    .limit(CHANGED_LIMIT + len(self._sent))
                )
            ).all()
            changed = [r for r in rows if self._sent.get(r.id) != r.updated_at][:CHANGED_LIMIT]
            last_event = await session.scalar(select(func.max(Event.id)))
            # O(statuses): the trigger-kept counters, not a scan of the tasks.
            by_status = await counts.by_status(session)
            workers = await live_workers(session, now - alive_window(self.settings))
            agents = await session.execute(
                select(
                    Agent.id,
                    Agent.name,
                    Agent.status,
                    Agent.isp_name,
                    Agent.external_ip,
                    Agent.last_heartbeat_at,
                    Agent.tasks_completed_count,
                    Agent.tasks_failed_count,
                    Agent.blocked_reason,
                )
                .where(Agent.revoked_at.is_(None))
                .order_by(Agent.id)
                .limit(500)
            )
            if not self._slow or loop.time() - self._slow_at >= SLOW_INTERVAL:
                self._slow = await self._slow_figures(session, now)
                self._slow_at = loop.time()
        self._remember(changed, since)
        self.latest = {
            "at": now.isoformat(),
            "tasks_by_status": by_status,
            "changed_tasks": [
                {
                    "id": r.id,
                    "status": r.status,
                    "priority": r.priority,
                    "retry_count": r.retry_count,
                    "error_type": r.error_type,
                    "updated_at": _iso(r.updated_at),
                }
                for r in changed
            ],
            "more_changes": len(changed) == CHANGED_LIMIT,
            "last_event_id": last_event or 0,
            "workers": [
                {
                    "id": w.id,
                    "kind": w.kind,
                    "concurrency": w.concurrency,
                    "in_flight": w.in_flight,
                    "processed": w.processed,
                    "last_seen_at": _iso(w.last_seen_at),
                }
                for w in workers
            ],
            "agents": [
                {**a._asdict(), "last_heartbeat_at": _iso(a.last_heartbeat_at)} for a in agents
            ],
            **self._slow,
        }
        return self.latest

    def _remember(self, changed: list[Any], since: datetime) -> None:
        for row in changed:
            self._sent[row.id] = row.updated_at
        if changed:
            self._watermark = max(self._watermark or since, changed[-1].updated_at)
        elif self._watermark is None:
            self._watermark = since
        horizon = self._watermark - OVERLAP
        self._sent = {i: t for i, t in self._sent.items() if t > horizon}
        if len(self._sent) > MAX_REMEMBERED:  # a burst: forget the oldest (resent at worst)
            newest = sorted(self._sent.items(), key=lambda item: item[1])[-MAX_REMEMBERED:]
            self._sent = dict(newest)

    async def _slow_figures(self, session: AsyncSession, now: datetime) -> dict[str, Any]:
        hour_ago = now - timedelta(hours=1)
        recent = CrawlAttempt.started_at >= hour_ago
        # Pages per minute: fetch attempts of the last hour, bucketed here by minute (the
        # started_at index bounds the scan to the hour).
        starts = await session.scalars(
            select(CrawlAttempt.started_at).where(
                recent, CrawlAttempt.phase == "fetch", CrawlAttempt.outcome == "success"
            )
        )
        per_minute = [0] * 60
        for started in starts:
            minute = int((now - started).total_seconds() // 60)
            if 0 <= minute < 60:
                per_minute[59 - minute] += 1
        errors = await count_by(
            session, CrawlAttempt.error_type, recent, CrawlAttempt.error_type.is_not(None)
        )
        fetches = await count_by(
            session, CrawlAttempt.outcome, recent, CrawlAttempt.phase == "fetch"
        )
        _, alerts = await proxy_health.proxy_health(session, self.settings)
        rows = await session.execute(
            select(Domain.id, Domain.domain_name, Domain.breaker_state).where(
                Domain.breaker_state != "closed"
            )
        )
        breakers = [{"id": i, "domain": n, "state": s} for i, n, s in rows]
        return {
            **await _alerts_sent(session, now),
            "pages_per_minute": per_minute,
            "errors_last_hour": {str(k): v for k, v in errors.items()},
            "fetches_last_hour": {str(k): v for k, v in fetches.items()},
            "alerts": [AlertPublic.model_validate(a).model_dump() for a in alerts],
            "open_breakers": breakers,
        }
