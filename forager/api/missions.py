"""Missions (seed 003): create, queue, cancel, follow them; start and stop the orchestrator;
its settings; the worker services and writers it calls, with a connection test each."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from forager.api.auth import ApiKeyDep
from forager.api.deps import EntityId, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.mission_schemas import (
    CheckpointName,
    ConnectionTestResult,
    FailurePublic,
    MissionCreate,
    MissionPublic,
    MissionsCreated,
    MissionSettings,
    MissionSettingsUpdate,
    MissionStatusName,
    OrchestratorStatus,
    ProxyTroublePublic,
    QueueRequest,
    QueueResult,
    Refusal,
    TimelineEvent,
    WorkerPerformancePublic,
    WorkerServiceCreate,
    WorkerServicePublic,
    WorkerServiceUpdate,
    WriterCreate,
    WriterPublic,
    WriterUpdate,
)
from forager.api.pages import Page
from forager.api.wire import Day
from forager.db.models import Mission, WorkerService, Writer
from forager.db.queries import count_by
from forager.db.types import utcnow
from forager.errors import Conflict
from forager.missions import admin, control, endpoints, reports

router = APIRouter(prefix="/api/missions", tags=["missions"])
services = APIRouter(prefix="/api/worker-services", tags=["missions"])
writers = APIRouter(prefix="/api/writers", tags=["missions"])

_NO_MISSION: dict[int | str, dict[str, Any]] = {404: {"description": "No such mission."}}
_NO_SERVICE: dict[int | str, dict[str, Any]] = {404: {"description": "No such worker service."}}
_NO_WRITER: dict[int | str, dict[str, Any]] = {404: {"description": "No such writer."}}
_NAME_TAKEN: dict[int | str, dict[str, Any]] = {409: {"description": "The name is taken."}}


# -- missions ----------------------------------------------------------------------------------


@router.post("", operation_id="create_missions", status_code=201)
async def create_missions(
    body: MissionCreate, runtime: RuntimeDep, key: ApiKeyDep
) -> MissionsCreated:
    """Create one mission for the range, or one per day (``split_by_day``); drafts unless
    ``queue``."""
    spec = admin.MissionSpec(
        body.date_start, body.date_end, body.media_type, tuple(body.languages), body.split_by_day
    )
    created = await admin.create(
        runtime.db,
        spec,
        queue=body.queue,
        by=key.name,
        max_span_days=runtime.settings.mission_max_span_days,
    )
    if body.queue:
        runtime.wake_missions()
    return MissionsCreated(missions=[MissionPublic.model_validate(m) for m in created])


@router.get("", operation_id="list_missions")
async def list_missions(
    session: ReadSessionDep,
    paging: PagingDep,
    status: Annotated[MissionStatusName | None, Query()] = None,
    checkpoint: Annotated[CheckpointName | None, Query()] = None,
    worker_id: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    error_code: Annotated[str | None, Query(max_length=20)] = None,
    date_from: Annotated[Day | None, Query(description="Covering a day on or after.")] = None,
    date_to: Annotated[Day | None, Query(description="Covering a day on or before.")] = None,
) -> Page[MissionPublic]:
    """Missions, newest first, with the total for pagination."""
    filters = admin.MissionFilter(status, checkpoint, worker_id, error_code, date_from, date_to)
    rows, total = await admin.listing(session, filters, limit=paging.limit, offset=paging.offset)
    return Page(
        items=[MissionPublic.model_validate(m) for m in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.post("/queue", operation_id="queue_missions")
async def queue_missions(body: QueueRequest, runtime: RuntimeDep, key: ApiKeyDep) -> QueueResult:
    """Queue the selected drafts (or failed / canceled missions, to run again)."""
    queued, refused = await admin.queue(runtime.db, body.mission_ids, key.name)
    if queued:
        runtime.wake_missions()
    return QueueResult(
        queued=queued,
        refused=[Refusal(id=i, current_status=s) for i, s in refused.items()],
    )


@router.get("/failures", operation_id="mission_failures")
async def mission_failures(
    session: ReadSessionDep,
    hours: Annotated[int, Query(ge=1, le=24 * 365)] = 24,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[FailurePublic]:
    """Missions that failed in the last ``hours``, newest first."""
    rows = await reports.failures(session, utcnow() - timedelta(hours=hours), limit)
    return [FailurePublic.model_validate(r) for r in rows]


@router.get("/performance", operation_id="mission_worker_performance")
async def mission_worker_performance(
    session: ReadSessionDep, days: Annotated[int, Query(ge=1, le=365)] = 7
) -> list[WorkerPerformancePublic]:
    """Scrapes completed and failed per worker service, mean duration."""
    rows = await reports.worker_performance(session, utcnow() - timedelta(days=days))
    return [WorkerPerformancePublic.model_validate(r) for r in rows]


@router.get("/proxies", operation_id="mission_proxy_trouble")
async def mission_proxy_trouble(
    session: ReadSessionDep, days: Annotated[int, Query(ge=1, le=365)] = 7
) -> list[ProxyTroublePublic]:
    """Each proxy's session failures and rotations, most failing first."""
    rows = await reports.proxy_trouble(session, utcnow() - timedelta(days=days))
    return [ProxyTroublePublic.model_validate(r) for r in rows]


async def _status(runtime: RuntimeDep, session: ReadSessionDep) -> OrchestratorStatus:
    view = await control.read(runtime.db)
    by_status = await count_by(session, Mission.status)
    return OrchestratorStatus(
        run_requested=view.run_requested,
        running=view.leading(utcnow()),
        leader_id=view.leader_id,
        leader_expires_at=view.leader_expires_at,
        run_started_at=view.run_started_at,
        run_ended_at=view.run_ended_at,
        session_limit=view.session_limit,
        max_retries=view.max_retries,
        missions_by_status={str(k): v for k, v in by_status.items()},
        workers=[_service(s, p) for s, p in await endpoints.services_with_proxies(session)],
    )


@router.get("/control", operation_id="get_orchestrator")
async def get_orchestrator(runtime: RuntimeDep, session: ReadSessionDep) -> OrchestratorStatus:
    """Mission Control: the run, its leader, the settings, missions by status, the services."""
    return await _status(runtime, session)


@router.post(
    "/control/start",
    operation_id="start_orchestrator",
    responses={
        409: {
            "description": "The run would do nothing: no mission is queued or running, or no "
            "worker service or writer is active; the detail says what to configure."
        }
    },
)
async def start_orchestrator(
    runtime: RuntimeDep, session: ReadSessionDep, key: ApiKeyDep
) -> OrchestratorStatus:
    """ "Iniciar": run the loop until no mission is queued or running (one process leads).
    Refused (409) when the run would do nothing, saying what to configure first."""
    reason = await control.why_nothing_would_run(session)
    if reason is not None:
        raise Conflict(reason)
    await control.request_run(runtime.db, key.name)
    runtime.wake_missions()
    return await _status(runtime, session)


@router.post("/control/stop", operation_id="stop_orchestrator")
async def stop_orchestrator(
    runtime: RuntimeDep, session: ReadSessionDep, key: ApiKeyDep
) -> OrchestratorStatus:
    """Stop the loop; missions in flight stay as they are until the next start recovers them."""
    await control.request_stop(runtime.db, key.name)
    runtime.wake_missions()
    return await _status(runtime, session)


@router.get("/settings", operation_id="get_mission_settings")
async def get_mission_settings(runtime: RuntimeDep) -> MissionSettings:
    """The orchestrator's ``session_limit`` and ``max_retries``."""
    view = await control.read(runtime.db)
    return MissionSettings.model_validate(view)


@router.patch("/settings", operation_id="update_mission_settings")
async def update_mission_settings(
    body: MissionSettingsUpdate, runtime: RuntimeDep
) -> MissionSettings:
    """Change them; a running loop uses the new values from its next tick."""
    view = await control.update_settings(
        runtime.db, session_limit=body.session_limit, max_retries=body.max_retries
    )
    return MissionSettings.model_validate(view)


@router.get("/{mission_id:int}", operation_id="get_mission", responses=_NO_MISSION)
async def get_mission(mission_id: EntityId, session: ReadSessionDep) -> MissionPublic:
    """One mission."""
    return MissionPublic.model_validate(await admin.get(session, mission_id))


@router.get("/{mission_id:int}/timeline", operation_id="mission_timeline", responses=_NO_MISSION)
async def mission_timeline(mission_id: EntityId, session: ReadSessionDep) -> list[TimelineEvent]:
    """The mission's log in order, with its service's session events naming it."""
    mission = await admin.get(session, mission_id)
    return [TimelineEvent.model_validate(e) for e in await reports.timeline(session, mission)]


@router.post(
    "/{mission_id:int}/cancel",
    operation_id="cancel_mission",
    responses={
        **_NO_MISSION,
        409: {"description": "The mission is not queued or running; current status in body."},
    },
)
async def cancel_mission(
    mission_id: EntityId, runtime: RuntimeDep, key: ApiKeyDep
) -> MissionPublic:
    """Cancel a queued or running mission (a scrape in flight is cancelled too)."""
    box = runtime.box
    return MissionPublic.model_validate(
        await admin.cancel(runtime.db, runtime.settings, box, mission_id, key.name)
    )


# -- worker services -----------------------------------------------------------------------------


def _service(row: WorkerService, proxy_name: str | None) -> WorkerServicePublic:
    return WorkerServicePublic.model_validate(row).model_copy(update={"proxy_name": proxy_name})


async def _one_service(session: ReadSessionDep, service_id: int) -> WorkerServicePublic:
    found = await endpoints.services_with_proxies(session, [service_id])
    if not found:
        await endpoints.get(session, WorkerService, service_id)  # raises NotFound
    return _service(*found[0])


@services.post("", operation_id="create_worker_service", status_code=201, responses=_NAME_TAKEN)
async def create_worker_service(
    body: WorkerServiceCreate, runtime: RuntimeDep
) -> WorkerServicePublic:
    """Add a worker service; its API key is encrypted at rest and never returned."""
    row = await endpoints.create(runtime.db, runtime.box, WorkerService, body.columns())
    return _service(row, None)


@services.get("", operation_id="list_worker_services")
async def list_worker_services(
    session: ReadSessionDep, paging: PagingDep
) -> Page[WorkerServicePublic]:
    """Worker services by id, with their state and the proxy their session holds."""
    rows, total = await endpoints.listing(
        session, WorkerService, limit=paging.limit, offset=paging.offset
    )
    found = await endpoints.services_with_proxies(session, [r.id for r in rows])
    return Page(
        items=[_service(s, p) for s, p in found],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@services.get("/{service_id:int}", operation_id="get_worker_service", responses=_NO_SERVICE)
async def get_worker_service(service_id: EntityId, session: ReadSessionDep) -> WorkerServicePublic:
    """One worker service."""
    return await _one_service(session, service_id)


@services.patch(
    "/{service_id:int}",
    operation_id="update_worker_service",
    responses={**_NO_SERVICE, **_NAME_TAKEN},
)
async def update_worker_service(
    service_id: EntityId, body: WorkerServiceUpdate, runtime: RuntimeDep
) -> WorkerServicePublic:
    """Change fields (a new API key replaces the old one); ``active: false`` retires it once
    its mission is done."""
    box = runtime.box
    await endpoints.update(runtime.db, box, WorkerService, service_id, body.changes())
    runtime.wake_missions()
    async with runtime.db.reader() as session:
        return await _one_service(session, service_id)


@services.delete(
    "/{service_id:int}",
    operation_id="delete_worker_service",
    status_code=204,
    responses={**_NO_SERVICE, 409: {"description": "It has a session or a mission."}},
)
async def delete_worker_service(service_id: EntityId, runtime: RuntimeDep) -> Response:
    """Remove an idle worker service (missions keep their history)."""
    await endpoints.delete(runtime.db, WorkerService, service_id)
    return Response(status_code=204)


@services.post("/{service_id:int}/test", operation_id="test_worker_service", responses=_NO_SERVICE)
async def test_worker_service(service_id: EntityId, runtime: RuntimeDep) -> ConnectionTestResult:
    """Call ``GET /session/status`` with its key now; the outcome is kept."""
    box = runtime.box
    result = await endpoints.test(runtime.db, runtime.settings, box, WorkerService, service_id)
    return ConnectionTestResult.model_validate(result)


# -- writers --------------------------------------------------------------------------------------


@writers.post("", operation_id="create_writer", status_code=201, responses=_NAME_TAKEN)
async def create_writer(body: WriterCreate, runtime: RuntimeDep) -> WriterPublic:
    """Add a writer; its API key is encrypted at rest and never returned."""
    row = await endpoints.create(runtime.db, runtime.box, Writer, body.columns())
    return WriterPublic.model_validate(row)


@writers.get("", operation_id="list_writers")
async def list_writers(session: ReadSessionDep, paging: PagingDep) -> Page[WriterPublic]:
    """Writers by id (the first active one stores every mission)."""
    rows, total = await endpoints.listing(session, Writer, limit=paging.limit, offset=paging.offset)
    return Page(
        items=[WriterPublic.model_validate(w) for w in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@writers.get("/{writer_id:int}", operation_id="get_writer", responses=_NO_WRITER)
async def get_writer(writer_id: EntityId, session: ReadSessionDep) -> WriterPublic:
    """One writer."""
    return WriterPublic.model_validate(await endpoints.get(session, Writer, writer_id))


@writers.patch(
    "/{writer_id:int}", operation_id="update_writer", responses={**_NO_WRITER, **_NAME_TAKEN}
)
async def update_writer(
    writer_id: EntityId, body: WriterUpdate, runtime: RuntimeDep
) -> WriterPublic:
    """Change fields (a new API key replaces the old one)."""
    box = runtime.box
    return WriterPublic.model_validate(
        await endpoints.update(runtime.db, box, Writer, writer_id, body.changes())
    )


@writers.delete(
    "/{writer_id:int}",
    operation_id="delete_writer",
    status_code=204,
    responses={**_NO_WRITER, 409: {"description": "It is storing a mission."}},
)
async def delete_writer(writer_id: EntityId, runtime: RuntimeDep) -> Response:
    """Remove a writer that is storing nothing."""
    await endpoints.delete(runtime.db, Writer, writer_id)
    return Response(status_code=204)


@writers.post("/{writer_id:int}/test", operation_id="test_writer", responses=_NO_WRITER)
async def test_writer(writer_id: EntityId, runtime: RuntimeDep) -> ConnectionTestResult:
    """Call ``GET /health``, then an authenticated call with its key, now; the outcome is kept."""
    box = runtime.box
    result = await endpoints.test(runtime.db, runtime.settings, box, Writer, writer_id)
    return ConnectionTestResult.model_validate(result)
