"""Seed §5.6: what a starting loop does first, so that a killed orchestrator loses nothing.

1. Running missions are reconciled with the services: an extraction without a job id, or whose
   job the worker service answers 404, goes back to the queue; one whose job exists is watched
   again by its service's driver. A storage whose writer job is unknown (404) is submitted again
   (no retry spent); one without a job id is submitted by the writer phase anyway.
2. Services are resynchronized: one scraping a running extraction stays on it; a session the
   service reports ready, with its proxy still held, is kept; any other is ended and the
   service goes back to ``idle``.
3. Proxies held by ``idle`` or switched-off services go back to the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sqlalchemy import or_, select

from forager.db.models import Mission, WorkerService, Writer
from forager.missions import moves, proxy_lease, workers
from forager.missions.clients import ServiceError
from forager.missions.context import Env
from forager.missions.states import SESSION_OK, SESSION_WAITING, Checkpoint, MissionStatus
from forager.missions.states import WorkerStatus as W

log = logging.getLogger(__name__)


async def recover(env: Env) -> None:
    extracting = await _missions(env)
    await _services(env, extracting)
    async with env.db.session() as session:
        idle = await session.scalars(
            select(WorkerService.id).where(
                or_(WorkerService.status == W.IDLE, WorkerService.active.is_(False))
            )
        )
        await proxy_lease.release_orphans(session, list(idle))


async def _missions(env: Env) -> dict[int, int]:
    """Reconcile running missions; the extractions still on a service: {service: mission}.

    The services are asked all at once, so one that hangs costs one timeout, not one each.
    """
    async with env.db.reader() as session:
        running = list(
            await session.scalars(select(Mission).where(Mission.status == MissionStatus.RUNNING))
        )
        services = {w.id: w for w in await session.scalars(select(WorkerService))}
        writers = {w.id: w for w in await session.scalars(select(Writer))}

    async def one(m: Mission) -> tuple[int, int] | None:
        if m.checkpoint == Checkpoint.ARMAZENAMENTO:
            writer = writers.get(m.writer_id) if m.writer_id is not None else None
            if writer is not None and m.writer_job_id and await _writer_lost(env, m, writer):
                async with env.db.session() as session:
                    await moves.writer_lost(session, m)
            return None
        service = services.get(m.worker_id) if m.worker_id is not None else None
        if service is None or m.worker_job_id is None or await _job_lost(env, m, service):
            async with env.db.session() as session:
                await moves.requeued(session, m, "no job to follow after a restart")
            return None
        return service.id, m.id

    found = await asyncio.gather(*(one(m) for m in running))
    return dict(pair for pair in found if pair is not None)


async def _writer_lost(env: Env, m: Mission, writer: Writer) -> bool:
    try:
        await env.writer_api(writer).status(m.writer_job_id or "")
    except ServiceError as exc:
        return exc.kind == "not_found"
    return False


async def _job_lost(env: Env, m: Mission, service: WorkerService) -> bool:
    try:
        await env.worker_api(service).job(m.worker_job_id or "")
    except ServiceError as exc:
        return exc.kind == "not_found"  # unreachable: its driver keeps polling
    return False


async def _services(env: Env, extracting: dict[int, int]) -> None:
    async with env.db.reader() as session:
        services = list(
            await session.scalars(select(WorkerService).where(WorkerService.active.is_(True)))
        )
    await asyncio.gather(*(_service(env, s, extracting.get(s.id)) for s in services))


async def _service(env: Env, service: WorkerService, mission: int | None) -> None:
    """One service back in step with what it says of its session."""
    if mission is not None:
        async with env.db.session() as session:
            await workers.move(session, service.id, status=W.SCRAPING, current_mission_id=mission)
        return
    async with env.db.reader() as session:
        proxy = await proxy_lease.held_by(session, service.id)
    try:
        remote: str | None = await env.worker_api(service).session_status()
    except ServiceError:
        remote = None
    if proxy is not None and remote in SESSION_OK:
        async with env.db.session() as session:
            await workers.move(session, service.id, status=W.READY, current_mission_id=None)
        return
    if proxy is not None and remote in SESSION_WAITING and service.status == W.INITIALIZING:
        return
    if service.status != W.IDLE or remote in SESSION_OK | SESSION_WAITING:
        with contextlib.suppress(ServiceError):
            await env.worker_api(service).end_session()
    async with env.db.session() as session:
        await proxy_lease.release(session, service.id)
        await workers.to_idle(session, service.id, keep_mission=False)
