"""Live monitors (issue 15): create, list, read, pause, resume, delete; the latest data with
its freshness (``X-Data-Freshness``, ``X-Data-Age-Seconds``, ``_metadata``) and the history
of changes."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from forager.api.deps import EntityId, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.monitor_schemas import (
    FieldChangePublic,
    MonitorCreate,
    MonitorData,
    MonitorPublic,
    MonitorStatus,
    ScraperErrorPublic,
    SnapshotPublic,
)
from forager.api.pages import Page
from forager.config import Settings
from forager.db.models import Monitor
from forager.db.types import utcnow
from forager.errors import Conflict, InvalidRequest
from forager.monitors import admin, diff
from forager.monitors.context import FAILING, FAILING_ERRORS, health_of

router = APIRouter(prefix="/api/monitors", tags=["monitors"])

_NO_MONITOR: dict[int | str, dict[str, Any]] = {404: {"description": "No such monitor."}}


def _wake(request: Request) -> None:
    """Let this process's runner claim now (others see it at their next look)."""
    runner = getattr(request.app.state, "monitors", None)
    if runner is not None:
        runner.wake()


def public(monitor: Monitor, settings: Settings, now: datetime) -> MonitorPublic:
    """The monitor as callers see it now: health and status computed from its freshness."""
    running = admin.is_running(monitor, now)
    health = (
        health_of(
            monitor.consecutive_errors,
            monitor.last_success_at,
            monitor.run_started_at,
            now,
            settings,
        )
        if running
        else monitor.health_status
    )
    age = (
        (now - monitor.last_success_at).total_seconds()
        if monitor.last_success_at is not None
        else None
    )
    if not monitor.enabled:
        status = "paused"
    elif running and monitor.held_reason is not None:
        status = "paused"  # held back by its domain's policy (monitors.policy): held_reason
    elif not running:
        status = "stopped"
    elif health == FAILING:
        # Failing by errors is an error; failing with no errors is a page gone stale.
        status = "error" if monitor.consecutive_errors > FAILING_ERRORS else "stale"
    else:
        status = "active"
    memory = monitor.memory_bytes
    return MonitorPublic.model_validate(
        {
            **{c: getattr(monitor, c) for c in MonitorPublic.model_fields if hasattr(monitor, c)},
            "status": status,
            "health_status": health,
            "running": running,
            "data_age_seconds": age,
            "memory_mb": round(memory / 1024 / 1024, 1) if memory is not None else None,
            "process": monitor.lease_owner if running else None,
        }
    )


@router.post("", operation_id="create_monitor", status_code=201)
async def create_monitor(
    body: MonitorCreate, runtime: RuntimeDep, request: Request
) -> MonitorPublic:
    """Watch a URL from now on (claimed by a process running monitors within seconds)."""
    kind = "css" if body.css is not None else "json" if body.json_paths is not None else None
    spec = admin.MonitorSpec(
        url=body.url.strip(),
        fetcher=body.fetcher,
        name=body.name,
        parser_name=body.parser_name,
        selector_type=kind,
        selectors=body.css if body.css is not None else body.json_paths,
        interval_seconds=body.interval_seconds,
        min_interval_seconds=body.min_interval_seconds,
        max_interval_seconds=body.max_interval_seconds,
        state_field=body.state_field,
        end_states=tuple(body.end_states) if body.end_states else None,
    )
    if body.css is not None and body.json_paths is not None:
        raise InvalidRequest("give exactly one of parser_name, css and json_paths", field="css")
    monitor = await admin.create(runtime.db, runtime.settings, spec)
    _wake(request)
    return public(monitor, runtime.settings, utcnow())


@router.get("", operation_id="list_monitors")
async def list_monitors(
    session: ReadSessionDep,
    runtime: RuntimeDep,
    paging: PagingDep,
    status: Annotated[MonitorStatus | None, Query(description="Stored status.")] = None,
) -> Page[MonitorPublic]:
    """Monitors, newest first, with their health and freshness."""
    rows, total = await admin.listing(
        session, status=status, limit=paging.limit, offset=paging.offset
    )
    now = utcnow()
    return Page(
        items=[public(m, runtime.settings, now) for m in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.get("/{monitor_id:int}", operation_id="get_monitor", responses=_NO_MONITOR)
async def get_monitor(
    monitor_id: EntityId, session: ReadSessionDep, runtime: RuntimeDep
) -> MonitorPublic:
    return public(await admin.get(session, monitor_id), runtime.settings, utcnow())


@router.post("/{monitor_id:int}/pause", operation_id="pause_monitor", responses=_NO_MONITOR)
async def pause_monitor(monitor_id: EntityId, runtime: RuntimeDep) -> MonitorPublic:
    """Stop watching (the process running it stops after its current cycle); idempotent."""
    return public(await admin.pause(runtime.db, monitor_id), runtime.settings, utcnow())


@router.post("/{monitor_id:int}/resume", operation_id="resume_monitor", responses=_NO_MONITOR)
async def resume_monitor(
    monitor_id: EntityId, runtime: RuntimeDep, request: Request
) -> MonitorPublic:
    """Watch again; its counters and history continue where they were."""
    monitor = await admin.resume(runtime.db, monitor_id)
    _wake(request)
    return public(monitor, runtime.settings, utcnow())


@router.delete(
    "/{monitor_id:int}", operation_id="delete_monitor", status_code=204, responses=_NO_MONITOR
)
async def delete_monitor(monitor_id: EntityId, runtime: RuntimeDep) -> Response:
    """Delete the monitor and its snapshots (its error and health logs stay)."""
    await admin.remove(runtime.db, monitor_id)
    return Response(status_code=204)


@router.get(
    "/{monitor_id:int}/data",
    operation_id="monitor_data",
    response_model=MonitorData,
    responses={
        404: {"description": "No such monitor."},
        409: {"description": "The monitor has no data yet."},
        200: {
            "headers": {
                "X-Data-Freshness": {
                    "description": "When the data was last confirmed (ISO 8601, UTC).",
                    "schema": {"type": "string"},
                },
                "X-Data-Age-Seconds": {
                    "description": "Seconds since then.",
                    "schema": {"type": "string"},
                },
            }
        },
    },
)
async def monitor_data(monitor_id: EntityId, session: ReadSessionDep) -> JSONResponse:
    """The latest snapshot: its fields and ``_metadata`` (the seed's data endpoint)."""
    monitor, snapshot = await admin.latest(session, monitor_id)
    if snapshot is None:
        raise Conflict(f"monitor {monitor_id} has no data yet (no successful poll so far)")
    scraped = max(monitor.last_success_at or snapshot.observed_at, snapshot.observed_at)
    age = max(0, math.floor((utcnow() - scraped).total_seconds()))
    stamp = scraped.isoformat().replace("+00:00", "Z")
    body = {
        **snapshot.data,
        "_metadata": {
            "scraped_at": stamp,
            "data_age_seconds": age,
            "changed_at": snapshot.observed_at.isoformat().replace("+00:00", "Z"),
            "scraper_id": monitor.scraper_id or snapshot.scraper_id,
            "monitor_id": monitor.id,
            "source": snapshot.data_source,
        },
    }
    return JSONResponse(body, headers={"X-Data-Freshness": stamp, "X-Data-Age-Seconds": str(age)})


@router.get("/{monitor_id:int}/history", operation_id="monitor_history", responses=_NO_MONITOR)
async def monitor_history(
    monitor_id: EntityId,
    session: ReadSessionDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="Changes to return.")] = 100,
) -> list[SnapshotPublic]:
    """The monitor's changes (every distinct value it saw), newest first, each with what
    differs from the one before (``changes``)."""
    found = await admin.history(session, monitor_id, limit + 1)  # the one before the oldest
    shown = []
    for index, snapshot in enumerate(found[:limit]):
        before = found[index + 1].data if index + 1 < len(found) else None
        public = SnapshotPublic.model_validate(snapshot)
        changed = diff.changes(before, snapshot.data)
        public.changes = [FieldChangePublic.model_validate(c) for c in changed]
        shown.append(public)
    return shown


errors_router = APIRouter(prefix="/api/monitor-errors", tags=["monitors"])


@errors_router.get("", operation_id="list_monitor_errors")
async def list_monitor_errors(
    session: ReadSessionDep,
    paging: PagingDep,
    resolved: Annotated[bool | None, Query(description="Only resolved or unresolved.")] = None,
    monitor_id: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
) -> Page[ScraperErrorPublic]:
    """Errors of every monitor's runs, newest first."""
    rows, total = await admin.error_listing(
        session, resolved=resolved, monitor_id=monitor_id, limit=paging.limit, offset=paging.offset
    )
    return Page(
        items=[ScraperErrorPublic.model_validate(e) for e in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@errors_router.post(
    "/{error_id:int}/resolve",
    operation_id="resolve_monitor_error",
    responses={404: {"description": "No such error."}},
)
async def resolve_monitor_error(error_id: EntityId, runtime: RuntimeDep) -> ScraperErrorPublic:
    """Mark an error resolved by hand (resolution method ``manual``)."""
    return ScraperErrorPublic.model_validate(await admin.resolve_error(runtime.db, error_id))
