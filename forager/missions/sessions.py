"""Sessions of a worker service (seed §5.2 steps 2.2.x): open with a fresh proxy, wait until
ready, reset after an error, end when the session limit is reached or the loop stops."""

from __future__ import annotations

import logging

from forager.db import audit
from forager.db.models import Proxy, WorkerService
from forager.db.types import utcnow
from forager.missions import proxy_lease, workers
from forager.missions.clients import ServiceError
from forager.missions.codes import MissionFailure
from forager.missions.context import Env, Limits
from forager.missions.policy import session_failure
from forager.missions.states import SESSION_OK, SESSION_WAITING, WORKER_ENTITY
from forager.missions.states import MissionEvent as E

log = logging.getLogger(__name__)
# What a worker service's session status means when it is not (yet) ready (seed §5.2 2.2.5).
SESSION_FAULTS = {"stuck": "ERROR102", "disconnected": "ERROR103", "terminated": "ERROR100"}
_SESSION_ERRORS = frozenset({"ERROR100", "ERROR101", "ERROR102", "ERROR103"})


class _Moved(Exception):
    """The service changed state meanwhile: undo this transaction and look again."""


def failure_of(error: ServiceError, message: str) -> MissionFailure:
    """A session call that got no usable answer: unreachable is ERROR502, a hang ERROR101."""
    if error.kind == "unreachable":
        return MissionFailure("ERROR502", f"{message}: {error.message}")
    if error.kind == "timeout":
        return MissionFailure("ERROR101", f"{message}: {error.message}")
    return MissionFailure("ERROR100", f"{message}: {error.message}")


def _mission_of(worker: WorkerService) -> dict[str, int]:
    return {} if worker.current_mission_id is None else {"mission_id": worker.current_mission_id}


async def open_session(env: Env, worker: WorkerService, limits: Limits) -> bool:
    """Draw a proxy and ask for a session; False when no proxy is free (ERROR501)."""
    now = utcnow()
    try:
        async with env.db.session() as session:
            proxy = await proxy_lease.lease(
                session,
                worker.id,
                avoid=worker.last_proxy_id,
                settings=env.settings,
                box=env.box,
                now=now,
            )
            if proxy is None:
                return False
            if not await workers.begin_session(session, worker.id, proxy.id, now):
                raise _Moved
            if worker.last_error_code in _SESSION_ERRORS and worker.last_proxy_id is not None:
                old = await session.get(Proxy, worker.last_proxy_id)
                audit.record(
                    session,
                    WORKER_ENTITY,
                    [worker.id],
                    E.PROXY_ROTATED,
                    {
                        "old_proxy": proxy_lease.proxy_label(old) if old is not None else None,
                        "new_proxy": proxy.name,
                        "reason": worker.last_error_code,
                        **_mission_of(worker),
                    },
                )
            audit.record(
                session,
                WORKER_ENTITY,
                [worker.id],
                E.SESSION_STARTED,
                {
                    "worker_id": worker.id,
                    "proxy_id": proxy.id,
                    "proxy_name": proxy.name,
                    **_mission_of(worker),
                },
            )
    except _Moved:
        return True
    try:
        await env.worker_api(worker).create_session(proxy.payload())
    except ServiceError as exc:
        await session_failure(env, worker, failure_of(exc, "POST /session"), limits)
    return True


async def check(env: Env, worker: WorkerService, limits: Limits) -> float:
    """Poll an initializing session; seconds until the next look."""
    settings = env.settings
    elapsed = (utcnow() - (worker.session_started_at or utcnow())).total_seconds()
    try:
        status = await env.worker_api(worker).session_status()
    except ServiceError as exc:
        await session_failure(env, worker, failure_of(exc, "GET /session/status"), limits)
        return 0
    if status in SESSION_OK:
        async with env.db.session() as session:
            if await workers.session_ready(session, worker.id):
                proxy = await proxy_lease.held_by(session, worker.id)
                if proxy is not None:
                    await proxy_lease.session_outcome(session, proxy.id, ok=True, settings=settings)
                audit.record(
                    session,
                    WORKER_ENTITY,
                    [worker.id],
                    E.SESSION_READY,
                    {
                        "worker_id": worker.id,
                        "duration_ms": int(elapsed * 1000),
                        **_mission_of(worker),
                    },
                )
        return 0
    if status in SESSION_WAITING:
        left = settings.mission_session_timeout_seconds - elapsed
        if left > 0:
            return min(settings.mission_session_poll_seconds, left)
        failure = MissionFailure("ERROR101", f"session not ready after {elapsed:.0f} s")
    else:
        code = SESSION_FAULTS.get(status, "ERROR100")
        failure = MissionFailure(code, f"the session is {status[:40]}")
    await session_failure(env, worker, failure, limits)
    return 0


async def _end_remote(env: Env, worker: WorkerService) -> None:
    try:
        await env.worker_api(worker).end_session()
    except ServiceError as exc:
        log.warning("worker service %s: DELETE /session failed: %s", worker.name, exc.message)


async def reset(env: Env, worker: WorkerService) -> float:
    """``error → idle`` (seed §4.2 "Reset") after one session poll interval of rest."""
    since = worker.last_error_at or utcnow()
    rest = env.settings.mission_session_poll_seconds - (utcnow() - since).total_seconds()
    if rest > 0:
        return rest
    await _end_remote(env, worker)
    async with env.db.session() as session:
        await proxy_lease.release(session, worker.id)
        await workers.to_idle(session, worker.id, keep_mission=True)
    return 0


async def close(env: Env, worker: WorkerService, reason: str) -> None:
    """End the session (DELETE), give its proxy back, ``idle`` with a fresh count."""
    await _end_remote(env, worker)
    async with env.db.session() as session:
        await proxy_lease.release(session, worker.id)
        await workers.to_idle(session, worker.id, keep_mission=False)
        audit.record(
            session,
            WORKER_ENTITY,
            [worker.id],
            E.SESSION_TERMINATED,
            {"worker_id": worker.id, "reason": reason},
        )


async def no_proxy(env: Env, worker: WorkerService) -> None:
    """ERROR501: nothing to draw; logged once per wait, the service tries again later."""
    async with env.db.session() as session:
        audit.record(
            session,
            WORKER_ENTITY,
            [worker.id],
            E.SESSION_FAILED,
            {
                "worker_id": worker.id,
                "error_code": "ERROR501",
                "error_message": "no proxy is free",
                "proxy_name": None,
            },
        )
