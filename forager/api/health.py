"""``/health`` (open) and ``/api/stats``: is Forager working, and how much."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError

from forager.api.deps import ReadSessionDep, RuntimeDep
from forager.api.schemas import BreakerSeen, Health, Stats, WorkerSeen
from forager.db.models import CrawlAttempt, CrawlTask, Domain, Product, Proxy
from forager.db.queries import count_by
from forager.db.types import utcnow
from forager.fetch import breakers
from forager.worker.registry import alive_window, live_workers

router = APIRouter(tags=["monitoring"])
stats_router = APIRouter(prefix="/api", tags=["monitoring"])
log = logging.getLogger(__name__)


@router.get("/health", operation_id="health", responses={503: {"model": Health}})
async def health(runtime: RuntimeDep) -> JSONResponse:
    """``healthy``; ``degraded`` when work is due but no worker has been seen recently;
    ``down`` (503) when the database does not answer."""
    now = utcnow()
    try:
        async with runtime.db.reader() as session:
            depth: dict[str, int] = await count_by(session, CrawlTask.status)
            due = await session.scalar(
                select(func.count()).where(
                    CrawlTask.status == "pending", CrawlTask.scheduled_at <= now
                )
            )
            workers = await live_workers(session, now - alive_window(runtime.settings))
            tripped = await breakers.not_closed(session, runtime.settings)
    except (DBAPIError, OSError, TimeoutError) as exc:
        log.warning("health check: database unreachable: %s", type(exc).__name__)
        body = Health(
            status="down", database="unreachable", queue_depth={}, detail=type(exc).__name__
        )
        return JSONResponse(body.model_dump(mode="json"), status_code=503)
    degraded = bool(due) and not workers
    body = Health(
        status="degraded" if degraded else "healthy",
        database="ok",
        queue_depth=depth,
        due_tasks=due or 0,
        workers=[WorkerSeen.model_validate(w) for w in workers],
        circuit_breakers=[BreakerSeen.model_validate(b) for b in tripped],
        detail=f"{due} tasks are due but no worker has been seen recently" if degraded else None,
    )
    return JSONResponse(body.model_dump(mode="json"))


@stats_router.get("/stats", operation_id="stats")
async def stats(session: ReadSessionDep, runtime: RuntimeDep) -> Stats:
    """One summary of the whole system: queue, throughput, errors, pools."""
    now = utcnow()
    hour_ago = now - timedelta(hours=1)

    async def grouped(column: Any, *where: Any) -> dict[str, int]:
        counts = await count_by(session, column, *where)
        return {str(k).lower() if isinstance(k, bool) else str(k): n for k, n in counts.items()}

    fetches = CrawlAttempt.phase == "fetch"
    recent = CrawlAttempt.started_at >= hour_ago
    return Stats(
        tasks_by_status=await grouped(CrawlTask.status),
        products=await session.scalar(select(func.count()).select_from(Product)) or 0,
        domains=await grouped(Domain.is_active),
        proxies=await grouped(Proxy.is_active),
        fetches_last_hour=await grouped(CrawlAttempt.outcome, fetches, recent),
        errors_last_hour=await grouped(
            CrawlAttempt.error_type, recent, CrawlAttempt.error_type.is_not(None)
        ),
        workers=[
            WorkerSeen.model_validate(w)
            for w in await live_workers(session, now - alive_window(runtime.settings))
        ],
    )
