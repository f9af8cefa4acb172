"""``/health``: is the database reachable, and how deep is the queue."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError

from forager.api.deps import RuntimeDep
from forager.api.schemas import Health
from forager.db.models import CrawlTask

router = APIRouter(tags=["monitoring"])
log = logging.getLogger(__name__)


@router.get("/health", operation_id="health", responses={503: {"model": Health}})
async def health(runtime: RuntimeDep) -> JSONResponse:
    """``healthy`` when the database answers; ``down`` (503) when it does not."""
    try:
        async with runtime.db.reader() as session:
            rows = await session.execute(
                select(CrawlTask.status, func.count()).group_by(CrawlTask.status)
            )
            depth: dict[str, int] = {row[0]: row[1] for row in rows}
    except (DBAPIError, OSError, TimeoutError) as exc:
        log.warning("health check: database unreachable: %s", type(exc).__name__)
        body = Health(
            status="down", database="unreachable", queue_depth={}, detail=type(exc).__name__
        )
        return JSONResponse(body.model_dump(), status_code=503)
    body = Health(status="healthy", database="ok", queue_depth=depth)
    return JSONResponse(body.model_dump())
