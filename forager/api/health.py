"""``/health`` (open: status only; the whole picture with an API key) and ``/api/stats``."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from forager.api.auth import OptionalKeyDep
from forager.api.deps import ReadSessionDep, RuntimeDep
from forager.api.health_schemas import (
    BreakerSeen,
    CircuitBreakerSeen,
    CrawlWorkerSeen,
    Health,
    HealthErrors,
    HealthPerformance,
    HealthResources,
    PartHealth,
    ScraperSeen,
    Stats,
)
from forager.config import Settings
from forager.db import breakers
from forager.db.models import CrawlAttempt, CrawlTask, Domain, Product, Proxy
from forager.db.queries import count_by
from forager.db.types import utcnow
from forager.errors import NotFound
from forager.monitors import health as monitor_health
from forager.queue import counts
from forager.worker.presence import alive_window, live_workers

router = APIRouter(tags=["monitoring"])
stats_router = APIRouter(prefix="/api", tags=["monitoring"])
log = logging.getLogger(__name__)

# Settings an operator may turn on that weaken safety: /health names each one that is on.
OPT_OUTS = ("browser_no_sandbox",)


def opt_outs(settings: Settings) -> list[str]:
    return [name for name in OPT_OUTS if getattr(settings, name)]


def _due(now: datetime) -> Any:
    return select(CrawlTask.id).where(CrawlTask.status == "pending", CrawlTask.scheduled_at <= now)


async def _due_count(session: AsyncSession, now: datetime, by: dict[tuple[str, int], int]) -> int:
    """Pending tasks whose time has come: the counters' pending tasks (``by``: tasks by status
    and priority) less those scheduled later. Naming each pending priority lets the claim index
    (status, priority, scheduled_at) read only the later ones, which are few (retries in
    backoff, scheduled submissions)."""
    pending = {priority: n for (status, priority), n in by.items() if status == "pending"}
    if not pending:
        return 0
    later = await session.scalar(
        select(func.count()).where(
            CrawlTask.status == "pending",
            CrawlTask.priority.in_(sorted(pending)),
            CrawlTask.scheduled_at > now,
        )
    )
    return sum(pending.values()) - (later or 0)


@router.get(
    "/health",
    operation_id="health",
    response_model=Health,
    responses={
        200: {"description": "``healthy`` or ``degraded``."},
        503: {
            "model": Health,
            "description": "``down``: the database does not answer, or the live monitors are "
            "down (enabled but none running, or more than 10 errors a minute). The same body.",
        },
        404: {"description": "The health check is turned off."},
    },
)
async def health(runtime: RuntimeDep, caller: OptionalKeyDep) -> JSONResponse:
    """The worse of the crawl queue's and the live monitors' health. Queue: ``degraded`` when
    work is due but no worker has been seen recently. Monitors (the seed's rules):
    ``degraded`` when some are stale or failing, an enabled one has no process running it, or
    they err 5-10 times a minute; ``down`` when monitors are enabled but none is running (no
    active scrapers; a server with no enabled monitor is never down for it) or they err more
    than 10 times a minute. ``down`` also when the database does not answer; only ``down``
    answers 503. Anonymous callers get the status, the time and the safety opt-outs in force;
    a valid API key also gets the seed's whole ``HealthStatus``: queue depth, workers,
    scrapers, resources, errors with every circuit breaker, performance."""
    if not runtime.settings.health_check_enabled:  # FORAGER_HEALTH_CHECK_ENABLED=false
        raise NotFound("the health check is turned off (FORAGER_HEALTH_CHECK_ENABLED=false)")
    now = utcnow()
    body = Health(status="healthy", timestamp=now, opt_outs=opt_outs(runtime.settings))
    every_breaker: list[breakers.BreakerView] = []
    try:
        async with runtime.db.reader() as session:
            workers = await live_workers(session, now - alive_window(runtime.settings))
            if caller is None:
                due = 1 if await session.scalar(_due(now).limit(1)) is not None else 0
            else:
                # One read of the counters for both (each read sums the unfolded deltas).
                by = await counts.by_status_and_priority(session)
                due = await _due_count(session, now, by)
                body.queue_depth = counts.by_status_of(by)
                body.workers = [CrawlWorkerSeen.model_validate(w) for w in workers]
                every_breaker = await breakers.views(session, runtime.settings)
                body.circuit_breakers = [
                    BreakerSeen.model_validate(b)
                    for b in every_breaker
                    if b.state != breakers.CLOSED
                ]
            watched = await monitor_health.summary(session, runtime.settings, now)
    except (DBAPIError, OSError, TimeoutError) as exc:
        log.warning("health check: database unreachable: %s", type(exc).__name__)
        body.status = "down"
        if caller is not None:
            body.database, body.detail = "unreachable", type(exc).__name__
        return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=503)
    if due and not workers:
        body.status = "degraded"
    queue = PartHealth(status=body.status)
    if caller is not None:
        body.database, body.due_tasks = "ok", due or 0
        if body.status == "degraded":
            body.detail = queue.detail = f"{due} tasks are due but no worker has been seen recently"
    # Live monitors (issue 15): the overall status is the worse of the queue's and theirs.
    if _RANK[watched.status] > _RANK[body.status]:
        body.status = watched.status  # type: ignore[assignment]
        if caller is not None:
            body.detail = watched.detail
    if caller is not None:
        _seed_blocks(body, queue, watched, every_breaker)
    code = 503 if body.status == "down" else 200
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=code)


_RANK = {"healthy": 0, "degraded": 1, "down": 2}


def _seed_blocks(
    body: Health,
    queue: PartHealth,
    watched: monitor_health.MonitorHealth,
    every_breaker: list[breakers.BreakerView],
) -> None:
    """The seed's HealthStatus blocks, for key holders: monitors' scrapers, resources,
    errors (every domain, proxy and monitor breaker, closed ones too, with its kind and the
    seed's statistics) and performance."""
    body.queue = queue
    body.monitors = PartHealth.model_validate(watched)
    body.active_scraper_count = len(watched.scrapers)
    body.total_matches_scraping = watched.enabled
    body.scrapers = [ScraperSeen.model_validate(s) for s in watched.scrapers]
    body.resources = HealthResources.model_validate(watched.resources)
    domain_and_proxy = [
        CircuitBreakerSeen.model_validate(b, from_attributes=True) for b in every_breaker
    ]
    body.errors = HealthErrors(
        last_minute=watched.errors["last_minute"],
        last_hour=watched.errors["last_hour"],
        circuit_breakers=[
            *domain_and_proxy,
            *(CircuitBreakerSeen.model_validate(b) for b in watched.errors["monitor_breakers"]),
        ],
    )
    body.performance = HealthPerformance.model_validate(watched.performance)


@stats_router.get("/stats", operation_id="stats")
async def stats(session: ReadSessionDep, runtime: RuntimeDep) -> Stats:
    """One summary of the whole system: queue, throughput, errors, pools."""
    now = utcnow()
    hour_ago = now - timedelta(hours=1)

    async def grouped(column: Any, *where: Any) -> dict[str, int]:
        counted = await count_by(session, column, *where)
        return {str(k).lower() if isinstance(k, bool) else str(k): n for k, n in counted.items()}

    fetches = CrawlAttempt.phase == "fetch"
    recent = CrawlAttempt.started_at >= hour_ago
    return Stats(
        tasks_by_status=await counts.by_status(session),
        products=await session.scalar(select(func.count()).select_from(Product)) or 0,
        domains=await grouped(Domain.is_active),
        proxies=await grouped(Proxy.is_active),
        fetches_last_hour=await grouped(CrawlAttempt.outcome, fetches, recent),
        errors_last_hour=await grouped(
            CrawlAttempt.error_type, recent, CrawlAttempt.error_type.is_not(None)
        ),
        workers=[
            CrawlWorkerSeen.model_validate(w)
            for w in await live_workers(session, now - alive_window(runtime.settings))
        ],
    )
