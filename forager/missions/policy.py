"""What a failure does to a mission, a session and a proxy (seed §7.2, §7.3).

- A session error (ERROR100–103) counts against the session's proxy (§6.3), releases it and
  puts the service in ``error``; the next session draws another proxy and logs
  ``proxy_rotated``. If the service was working on a mission, the mission spends a retry and
  resumes on the new session, or fails with ERROR104.
- ERROR502 (the service cannot be reached) puts the service in ``error`` too, but is not the
  proxy's fault; a mission it held fails at once.
- A scrape error (ERROR200–202) spends a retry and the job is submitted again, or the mission
  fails with ERROR203; ERROR400/401/500 fail it at once.
- A writer error (ERROR300–303) is resubmitted once at most, or fails with ERROR304.
- An internal error (ERROR500: a step of the orchestrator raised) fails the mission at once and
  lets its worker service go.
Each failure is one transaction: events, mission, service and proxy move together.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from forager.db import audit
from forager.db.models import Mission, WorkerService
from forager.missions import moves, proxy_lease, workers
from forager.missions.codes import MissionFailure, decide
from forager.missions.context import Env, Limits
from forager.missions.states import WORKER_ENTITY, MissionStatus
from forager.missions.states import MissionEvent as E

_PROXY_FAULTS = frozenset({"ERROR100", "ERROR101", "ERROR102", "ERROR103"})


async def _mission(session: AsyncSession, mission_id: int | None) -> Mission | None:
    if mission_id is None:
        return None
    m = await session.get(Mission, mission_id)
    return m if m is not None and m.status == MissionStatus.RUNNING else None


async def session_failure(
    env: Env, worker: WorkerService, failure: MissionFailure, limits: Limits
) -> None:
    """A session of ``worker`` failed (or the service cannot be reached)."""
    async with env.db.session() as session:
        proxy = await proxy_lease.held_by(session, worker.id)
        if proxy is not None and failure.code in _PROXY_FAULTS:
            await proxy_lease.session_outcome(session, proxy.id, ok=False, settings=env.settings)
        await proxy_lease.release(session, worker.id)
        await workers.session_failed(session, worker.id, failure.code)
        details = {
            "worker_id": worker.id,
            "error_code": failure.code,
            "error_message": failure.message,
            "proxy_name": proxy_lease.proxy_label(proxy) if proxy is not None else None,
        }
        m = await _mission(session, worker.current_mission_id)
        if m is not None:
            details["mission_id"] = m.id
        audit.record(session, WORKER_ENTITY, [worker.id], E.SESSION_FAILED, details)
        if m is None:
            return
        verdict = decide(failure.code, retry_count=m.retry_count, max_retries=limits.max_retries)
        if verdict.retry:
            await moves.retried(session, m, failure.code, "session")
        elif await moves.failed(session, m, verdict.final_code, failure.message):
            await workers.drop_mission(session, worker.id, m.id)


async def scrape_failure(env: Env, m: Mission, failure: MissionFailure, limits: Limits) -> None:
    """The scrape job of ``m`` failed: submit it again, or fail the mission."""
    async with env.db.session() as session:
        moves.log(
            session,
            m.id,
            E.SCRAPE_FAILED,
            worker_job_id=m.worker_job_id,
            error_code=failure.code,
            error_message=failure.message,
        )
        verdict = decide(failure.code, retry_count=m.retry_count, max_retries=limits.max_retries)
        if verdict.retry:
            await moves.retried(session, m, failure.code, "scrape")
        elif await moves.failed(session, m, verdict.final_code, failure.message):
            await moves.free_worker(session, m, counted=True)


async def writer_failure(env: Env, m: Mission, failure: MissionFailure, limits: Limits) -> None:
    """The writer could not store ``m``: resubmit once, or fail the mission."""
    async with env.db.session() as session:
        moves.log(
            session,
            m.id,
            E.WRITER_FAILED,
            writer_job_id=m.writer_job_id,
            error=failure.message,
            error_code=failure.code,
        )
        verdict = decide(
            failure.code,
            retry_count=m.retry_count,
            max_retries=limits.max_retries,
            writer_retries=m.writer_retry_count,
        )
        if verdict.retry:
            await moves.retried(session, m, failure.code, "writer")
        else:
            await moves.failed(session, m, verdict.final_code, failure.message)


async def internal_failure(
    env: Env, mission_id: int, failure: MissionFailure, limits: Limits
) -> None:
    """A step working on mission ``mission_id`` raised (ERROR500): seed §7.2 does not retry
    it, so the mission fails for good and its worker service lets it go."""
    async with env.db.session() as session:
        m = await _mission(session, mission_id)
        if m is None:
            return
        verdict = decide(failure.code, retry_count=m.retry_count, max_retries=limits.max_retries)
        if await moves.failed(session, m, verdict.final_code, failure.message):
            await moves.free_worker(session, m, counted=True)
