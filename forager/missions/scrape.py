"""The scrape of a mission on a worker service (seed §5.2 steps 2.4–2.6): submit the job,
poll it, hand a completed one to the writer phase."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from forager.db.models import Mission, WorkerService
from forager.db.types import utcnow
from forager.missions import moves, workers
from forager.missions.clients import JobState, ServiceError, WorkerServiceAPI
from forager.missions.codes import MissionFailure
from forager.missions.context import Env, Limits
from forager.missions.dataurl import data_url, is_safe_job_id
from forager.missions.policy import scrape_failure, session_failure
from forager.missions.sessions import SESSION_FAULTS
from forager.missions.states import JOB_WAITING, Checkpoint, MissionStatus
from forager.missions.states import MissionEvent as E

# Seed §8.3: fixed for every scrape.
SORT_BY = "qtd_ads"
MAX_ADS = "all"
BATCH_SIZE = 150


@dataclass
class JobWatch:
    """What polling one job remembers between polls (kept in memory only)."""

    job_id: str | None = None
    failures: int = 0
    progress: tuple[int, float | None] = field(default=(0, None))


def payload(m: Mission) -> dict[str, Any]:
    """Seed §5.2 step 2.4.1."""
    return {
        "filters": {
            "date_range": {"start": m.date_start.isoformat(), "end": m.date_end.isoformat()},
            "format": m.media_type,
            "sort_by": SORT_BY,
            "languages": list(m.languages),
        },
        "options": {"max_ads": MAX_ADS, "batch_size": BATCH_SIZE},
    }


async def step(env: Env, worker: WorkerService, limits: Limits, watch: JobWatch) -> float:
    """One look at the mission ``worker`` is scraping; seconds until the next."""
    m: Mission | None = None
    if worker.current_mission_id is not None:
        async with env.db.reader() as session:
            m = await session.get(Mission, worker.current_mission_id)
    mine = (
        m is not None
        and m.status == MissionStatus.RUNNING
        and m.checkpoint == Checkpoint.EXTRACAO
        and m.worker_id == worker.id
    )
    if m is None or not mine:  # canceled, or moved on by someone else: the service is free
        async with env.db.session() as session:
            if worker.current_mission_id is None:
                await workers.move(session, worker.id, from_=["scraping"], status="ready")
            elif not await workers.release(
                session, worker.id, worker.current_mission_id, counted=False
            ):
                await workers.drop_mission(session, worker.id, worker.current_mission_id)
        return 0
    if m.worker_job_id is None:
        return await _submit(env, worker, m, limits)
    if watch.job_id != m.worker_job_id:
        watch.job_id, watch.failures, watch.progress = m.worker_job_id, 0, (0, None)
    return await _poll(env, worker, m, limits, watch)


async def _submit(env: Env, worker: WorkerService, m: Mission, limits: Limits) -> float:
    api = env.worker_api(worker)
    try:
        job_id = await api.start_scrape(payload(m))
    except ServiceError as exc:
        if exc.kind == "unreachable":
            failure = MissionFailure("ERROR502", f"POST /scrape: {exc.message}")
            await session_failure(env, worker, failure, limits)
        elif exc.status == 409:  # the service has no ready session for it
            failure = MissionFailure("ERROR100", f"POST /scrape: {exc.message}")
            await session_failure(env, worker, failure, limits)
        else:
            await scrape_failure(env, m, MissionFailure("ERROR200", exc.message), limits)
        return 0
    if not is_safe_job_id(job_id):
        failure = MissionFailure("ERROR400", "the job id would build a URL outside the storage")
        await scrape_failure(env, m, failure, limits)
        return 0
    async with env.db.session() as session:
        accepted = await moves.job_accepted(session, m, job_id)
    if not accepted:  # canceled while we asked: that job has no mission
        with contextlib.suppress(ServiceError):
            await api.cancel_job(job_id)
        return 0
    return env.settings.mission_job_poll_seconds


async def _session_fault(api: WorkerServiceAPI) -> str | None:
    """After a failed job: whether the session is what broke (its code), else ``None``."""
    try:
        return SESSION_FAULTS.get(await api.session_status())
    except ServiceError:
        return None


async def _poll(
    env: Env, worker: WorkerService, m: Mission, limits: Limits, watch: JobWatch
) -> float:
    settings = env.settings
    api = env.worker_api(worker)
    job_id = m.worker_job_id or ""
    running = (utcnow() - (m.job_started_at or utcnow())).total_seconds()
    if running > settings.mission_job_timeout_seconds:
        with contextlib.suppress(ServiceError):
            await api.cancel_job(job_id)
        failure = MissionFailure("ERROR202", f"job {job_id} still running after {running:.0f} s")
        await scrape_failure(env, m, failure, limits)
        return 0
    try:
        job = await api.job(job_id)
    except ServiceError as exc:
        if exc.kind == "not_found":
            failure = MissionFailure("ERROR200", f"the worker service does not know job {job_id}")
            await scrape_failure(env, m, failure, limits)
            return 0
        watch.failures += 1
        if watch.failures < settings.mission_poll_failure_limit:
            return settings.mission_job_poll_seconds
        if exc.kind == "unreachable":
            await session_failure(env, worker, MissionFailure("ERROR502", exc.message), limits)
        else:
            await scrape_failure(env, m, MissionFailure("ERROR200", exc.message), limits)
        return 0
    watch.failures = 0
    return await _handle(env, worker, m, limits, watch, job)


async def _handle(
    env: Env, worker: WorkerService, m: Mission, limits: Limits, watch: JobWatch, job: JobState
) -> float:
    if job.status in JOB_WAITING:
        if (job.ads_count, job.progress_pct) != watch.progress:
            watch.progress = (job.ads_count, job.progress_pct)
            async with env.db.session() as session:
                await moves.progress(
                    session,
                    m,
                    E.SCRAPE_PROGRESS,
                    worker_job_id=m.worker_job_id,
                    ads_count=job.ads_count,
                    progress_pct=job.progress_pct,
                )
        return env.settings.mission_job_poll_seconds
    if job.status == "completed":
        try:
            url = data_url(worker.storage_domain, m.worker_job_id or "")
        except MissionFailure as failure:
            await scrape_failure(env, m, failure, limits)
            return 0
        async with env.db.session() as session:
            await moves.scrape_completed(session, m, url, job.ads_count)
        env.wake()
        return 0
    if job.status == "empty":
        async with env.db.session() as session:
            await moves.completed_empty(session, m)
        return 0
    if job.status == "cancelled":
        message = f"job {m.worker_job_id} was cancelled by the worker service"
        await scrape_failure(env, m, MissionFailure("ERROR201", message), limits)
        return 0
    # failed or paused (seed: "tratar como failed"): was it the session?
    code = await _session_fault(env.worker_api(worker))
    message = job.error or f"job {m.worker_job_id} is {job.status}"
    if code is not None:
        await session_failure(env, worker, MissionFailure(code, message), limits)
    else:
        await scrape_failure(env, m, MissionFailure("ERROR200", message), limits)
    return 0
