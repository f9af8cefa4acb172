"""The writer phase of a mission (seed §5.3): submit the scrape's JSON to a writer, poll the
writer job, finish the mission. Runs beside the worker phase: the service is already free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from forager.db.models import Mission, Writer
from forager.db.types import utcnow
from forager.missions import moves
from forager.missions.clients import ServiceError, WriterJob
from forager.missions.codes import MissionFailure
from forager.missions.context import Env, Limits
from forager.missions.policy import writer_failure
from forager.missions.states import Checkpoint, MissionStatus
from forager.missions.states import MissionEvent as E

FAILED_ITEMS_KEPT = 20  # failed items logged per mission (the rest are counted)


@dataclass
class WriterWatch:
    failures: int = 0
    progress: tuple[int, int] = field(default=(-1, -1))


def job_id_for(m: Mission) -> str:
    """The job id Forager proposes: the same for one attempt, so a resubmission after a crash
    finds the job the writer already has instead of writing twice."""
    created = int(m.created_at.timestamp() * 1_000_000)
    return f"mission-{m.id}-{created}-{m.retry_count}"


def failure_of(error: ServiceError, what: str) -> MissionFailure:
    """Seed §7.1: refused 301, timeout 302, a refused payload 303, anything else 300."""
    if error.kind == "unreachable":
        return MissionFailure("ERROR301", f"{what}: {error.message}")
    if error.kind == "timeout":
        return MissionFailure("ERROR302", f"{what}: {error.message}")
    if error.status in (400, 422):
        return MissionFailure("ERROR303", f"{what}: {error.message}")
    return MissionFailure("ERROR300", f"{what}: {error.message}")


def _failed_items(job: WriterJob) -> list[dict[str, Any]]:
    kept = []
    for item in job.failed_items[:FAILED_ITEMS_KEPT]:
        if not isinstance(item, dict):
            continue
        data = item.get("data")
        ad_id = data.get("id") if isinstance(data, dict) else None
        kept.append(
            {
                "index": item.get("index") if isinstance(item.get("index"), int) else None,
                "id": str(ad_id)[:100] if ad_id is not None else None,
                "error": str(item.get("error", ""))[:300],
            }
        )
    return kept


async def step(env: Env, mission_id: int, limits: Limits, watch: WriterWatch) -> float | None:
    """One look at a mission in ``armazenamento``; ``None`` once it has left that phase."""
    async with env.db.reader() as session:
        m = await session.get(Mission, mission_id)
        writer = await session.get(Writer, m.writer_id) if m and m.writer_id else None
        first_active = (
            await session.scalars(
                select(Writer).where(Writer.active.is_(True)).order_by(Writer.id).limit(1)
            )
        ).first()
    if m is None or m.status != MissionStatus.RUNNING or m.checkpoint != Checkpoint.ARMAZENAMENTO:
        return None
    if m.writer_job_id is None:
        return await _submit(env, m, first_active, limits)
    if writer is None:  # the writer was deleted: give the data to another one
        async with env.db.session() as session:
            await moves.writer_lost(session, m)
        return 0
    return await _poll(env, m, writer, limits, watch)


async def _submit(env: Env, m: Mission, writer: Writer | None, limits: Limits) -> float:
    if writer is None:
        await writer_failure(env, m, MissionFailure("ERROR301", "no active writer"), limits)
        return 0
    try:
        job_id = await env.writer_api(writer).process(job_id_for(m), m.worker_data_url or "")
    except ServiceError as exc:
        await writer_failure(env, m, failure_of(exc, "POST /process"), limits)
        return 0
    async with env.db.session() as session:
        await moves.writer_accepted(session, m, writer.id, job_id)
    return env.settings.mission_writer_poll_seconds


async def _poll(env: Env, m: Mission, writer: Writer, limits: Limits, watch: WriterWatch) -> float:
    settings = env.settings
    running = (utcnow() - (m.writer_started_at or utcnow())).total_seconds()
    if running > settings.mission_writer_timeout_seconds:
        message = f"writer job {m.writer_job_id} still processing after {running:.0f} s"
        await writer_failure(env, m, MissionFailure("ERROR300", message), limits)
        return 0
    try:
        job = await env.writer_api(writer).status(m.writer_job_id or "")
    except ServiceError as exc:
        if exc.kind != "not_found":
            watch.failures += 1
            if watch.failures < settings.mission_poll_failure_limit:
                return settings.mission_writer_poll_seconds
        await writer_failure(env, m, failure_of(exc, "GET /status"), limits)
        return 0
    watch.failures = 0
    if job.status == "processing":
        if (job.processed, job.total) != watch.progress:
            watch.progress = (job.processed, job.total)
            async with env.db.session() as session:
                await moves.progress(
                    session,
                    m,
                    E.WRITER_PROGRESS,
                    writer_job_id=m.writer_job_id,
                    processed=job.processed,
                    total=job.total,
                )
        return settings.mission_writer_poll_seconds
    if job.status in ("completed", "partial"):
        async with env.db.session() as session:
            await moves.completed(
                session,
                m,
                success_count=job.success_count,
                failed_count=job.failed_count,
                failed_items=_failed_items(job),
            )
        return 0
    error = job.error or f"writer job {m.writer_job_id} failed"
    code = "ERROR303" if "schema" in error.lower() else "ERROR300"
    await writer_failure(env, m, MissionFailure(code, error), limits)
    return 0
