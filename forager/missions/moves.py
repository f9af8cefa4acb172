"""Every statement that moves a mission, each a compare-and-set that writes its event.

A mission is moved from the state it was read in: ``_unchanged(m)`` is the guard (same status,
checkpoint, job ids and retry count), so an operator's cancel, or another orchestrator, racing
this one makes the move a no-op instead of a corruption. The claim of seed §6.4 is
``claim()``: ``SELECT … FOR UPDATE SKIP LOCKED`` then ``UPDATE … WHERE status = 'queued'
RETURNING`` — on SQLite the ``FOR UPDATE`` is dropped and ``BEGIN IMMEDIATE`` makes the
transaction the only writer, which gives the same guarantee.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db import audit
from forager.db.models import Mission, WorkerService
from forager.db.types import utcnow
from forager.missions import workers
from forager.missions.states import QUEUEABLE, Checkpoint, MissionStatus
from forager.missions.states import MissionEvent as E

M = MissionStatus
_TABLE = cast(Table, Mission.__table__)
# Cleared whenever a mission goes (back) to the queue.
_FRESH: dict[str, Any] = {
    "worker_id": None,
    "worker_job_id": None,
    "worker_data_url": None,
    "proxy_used": None,
    "writer_id": None,
    "writer_job_id": None,
    "ads_count": None,
    "error_code": None,
    "error_message": None,
    "started_at": None,
    "job_started_at": None,
    "writer_started_at": None,
    "finished_at": None,
}


def log(session: AsyncSession, mission_id: int, event: E, **details: Any) -> None:
    audit.record(session, "mission", [mission_id], event, details)


def ms(since: datetime | None, now: datetime) -> int | None:
    return None if since is None else int((now - since).total_seconds() * 1000)


def config_of(m: Mission) -> dict[str, Any]:
    """The mission's own settings, as logged with ``scrape_started``."""
    return {
        "date_start": m.date_start.isoformat(),
        "date_end": m.date_end.isoformat(),
        "media_type": m.media_type,
        "languages": list(m.languages),
    }


def _unchanged(m: Mission) -> list[Any]:
    c = _TABLE.c
    same = [
        c.id == m.id,
        c.status == m.status,
        c.retry_count == m.retry_count,
        c.checkpoint.is_(None) if m.checkpoint is None else c.checkpoint == m.checkpoint,
    ]
    for column, value in ((c.worker_job_id, m.worker_job_id), (c.writer_job_id, m.writer_job_id)):
        same.append(column.is_(None) if value is None else column == value)
    return same


async def _move(session: AsyncSession, where: list[Any], **values: Any) -> bool:
    result = await session.execute(
        update(_TABLE).where(*where).values(updated_at=utcnow(), **values)
    )
    return bool(getattr(result, "rowcount", 0))


async def moved(session: AsyncSession, m: Mission, **values: Any) -> bool:
    """Move ``m`` if it is still as it was read."""
    return await _move(session, _unchanged(m), **values)


async def free_worker(session: AsyncSession, m: Mission, *, counted: bool = False) -> None:
    """The worker service that held ``m`` lets it go: ``ready`` again if it was scraping it,
    else (between sessions of a retry) it only forgets the mission."""
    if m.status != M.RUNNING or m.worker_id is None:
        return
    if not await workers.release(session, m.worker_id, m.id, counted=counted):
        await workers.drop_mission(session, m.worker_id, m.id)


async def progress(session: AsyncSession, m: Mission, event: E, **details: Any) -> bool:
    """A progress event, written only while ``m`` is still where it was read (a poll answered
    just after a cancel must not add to a finished mission's log)."""
    if not await moved(session, m):
        return False
    log(session, m.id, event, **details)
    return True


# -- the operator ---------------------------------------------------------------------------


async def queue(
    session: AsyncSession, ids: Sequence[int], by: str
) -> tuple[list[int], dict[int, str]]:
    """Seed §5.1 for each id: queued ids, and the refused ones with their current status."""
    now = utcnow()
    rows = await session.execute(
        select(Mission.id, Mission.status).where(Mission.id.in_(list(ids)))
    )
    found: dict[int, str] = {row[0]: row[1] for row in rows}
    queued: list[int] = []
    refused: dict[int, str] = {}
    for mission_id in dict.fromkeys(ids):
        current = found.get(mission_id)
        if current is None:
            refused[mission_id] = "missing"
            continue
        ok = await _move(
            session,
            [_TABLE.c.id == mission_id, _TABLE.c.status.in_(list(QUEUEABLE))],
            status=M.QUEUED,
            checkpoint=Checkpoint.ATRIBUIDO,
            queued_at=now,
            retry_count=0,
            writer_retry_count=0,
            **_FRESH,
        )
        if ok:
            queued.append(mission_id)
            log(session, mission_id, E.MISSION_QUEUED, queued_by=by)
        else:
            refused[mission_id] = current
    return queued, refused


async def cancel(session: AsyncSession, m: Mission, by: str) -> bool:
    """Seed §5.4 in the database: ``canceled`` from where it was; the caller cancels the job."""
    now = utcnow()
    if not await moved(session, m, status=M.CANCELED, finished_at=now):
        return False
    await free_worker(session, m)
    log(session, m.id, E.MISSION_CANCELED, canceled_by=by, previous_checkpoint=m.checkpoint)
    return True


# -- the worker phase -------------------------------------------------------------------------


async def claim(
    session: AsyncSession, worker: WorkerService, proxy_name: str | None
) -> Mission | None:
    """Seed §6.4: the oldest queued mission, to ``worker`` (which goes to ``scraping``)."""
    now = utcnow()
    pick = (
        select(Mission.id)
        .where(Mission.status == M.QUEUED)
        .order_by(Mission.queued_at, Mission.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    mission_id = await session.scalar(pick)
    if mission_id is None:
        return None
    row = (
        await session.execute(
            update(Mission)
            .where(Mission.id == mission_id, Mission.status == M.QUEUED)
            .values(
                status=M.RUNNING,
                checkpoint=Checkpoint.EXTRACAO,
                worker_id=worker.id,
                proxy_used=proxy_name,
                started_at=now,
                updated_at=now,
            )
            .returning(Mission)
            .execution_options(synchronize_session=False)
        )
    ).scalar_one_or_none()
    if row is None:
        return None
    if not await workers.assign(session, worker.id, row.id):
        raise RuntimeError(f"worker service {worker.id} is no longer ready")  # rolls back
    log(
        session,
        row.id,
        E.MISSION_ASSIGNED,
        worker_id=worker.id,
        worker_name=worker.name,
        proxy_name=proxy_name,
    )
    return row


async def job_accepted(session: AsyncSession, m: Mission, job_id: str) -> bool:
    """Seed §5.2 step 2.4.3."""
    if not await moved(session, m, worker_job_id=job_id, job_started_at=utcnow()):
        return False
    log(session, m.id, E.SCRAPE_STARTED, worker_job_id=job_id, mission_config=config_of(m))
    return True


async def scrape_completed(session: AsyncSession, m: Mission, data_url: str, ads: int) -> bool:
    """Seed §5.2 steps 2.5–2.6: to the writer phase, and the worker service is free again."""
    now = utcnow()
    if not await moved(
        session, m, checkpoint=Checkpoint.ARMAZENAMENTO, worker_data_url=data_url, ads_count=ads
    ):
        return False
    if m.worker_id is not None:
        await workers.release(session, m.worker_id, m.id)
    log(
        session,
        m.id,
        E.SCRAPE_COMPLETED,
        worker_job_id=m.worker_job_id,
        ads_count=ads,
        duration_ms=ms(m.job_started_at, now),
    )
    return True


async def completed_empty(session: AsyncSession, m: Mission) -> bool:
    """An ``empty`` job: the mission is done with no ads, no writer needed."""
    now = utcnow()
    if not await moved(
        session,
        m,
        status=M.COMPLETED,
        checkpoint=Checkpoint.FINALIZADO,
        ads_count=0,
        finished_at=now,
    ):
        return False
    if m.worker_id is not None:
        await workers.release(session, m.worker_id, m.id)
    log(session, m.id, E.SCRAPE_EMPTY, worker_job_id=m.worker_job_id)
    log(
        session,
        m.id,
        E.MISSION_COMPLETED,
        total_duration_ms=ms(m.started_at, now),
        ads_count=0,
        success_count=0,
        failed_count=0,
    )
    return True


# -- the writer phase -------------------------------------------------------------------------


async def writer_accepted(session: AsyncSession, m: Mission, writer_id: int, job_id: str) -> bool:
    """Seed §5.3 step 3.1.3."""
    if not await moved(
        session, m, writer_id=writer_id, writer_job_id=job_id, writer_started_at=utcnow()
    ):
        return False
    log(session, m.id, E.WRITER_STARTED, writer_job_id=job_id, data_url=m.worker_data_url)
    return True


async def writer_lost(session: AsyncSession, m: Mission) -> bool:
    """The writer does not know the job (it restarted): submit again, no retry spent."""
    return await moved(session, m, writer_id=None, writer_job_id=None, writer_started_at=None)


async def completed(
    session: AsyncSession,
    m: Mission,
    *,
    success_count: int,
    failed_count: int,
    failed_items: list[Any],
) -> bool:
    """Seed §5.3 step 3.3 (a ``partial`` writer job logs its failed items too)."""
    now = utcnow()
    if not await moved(
        session, m, status=M.COMPLETED, checkpoint=Checkpoint.FINALIZADO, finished_at=now
    ):
        return False
    details: dict[str, Any] = {
        "writer_job_id": m.writer_job_id,
        "success_count": success_count,
        "failed_count": failed_count,
        "duration_ms": ms(m.writer_started_at, now),
    }
    if failed_items:
        details["failed_items"] = failed_items
    log(session, m.id, E.WRITER_COMPLETED, **details)
    log(
        session,
        m.id,
        E.MISSION_COMPLETED,
        total_duration_ms=ms(m.started_at, now),
        ads_count=m.ads_count,
        success_count=success_count,
        failed_count=failed_count,
    )
    return True


# -- failures -----------------------------------------------------------------------------------


async def retried(session: AsyncSession, m: Mission, code: str, phase: str) -> bool:
    """Seed §7.2: one retry spent; the phase starts again (``reinicia fase atual``)."""
    values: dict[str, Any] = {"retry_count": m.retry_count + 1}
    if phase == "writer":
        values |= {
            "writer_retry_count": m.writer_retry_count + 1,
            "writer_id": None,
            "writer_job_id": None,
            "writer_started_at": None,
        }
    else:
        values |= {"worker_job_id": None, "job_started_at": None}
    if not await moved(session, m, **values):
        return False
    log(session, m.id, E.RETRY_TRIGGERED, attempt=m.retry_count + 1, error_code=code, phase=phase)
    return True


async def failed(session: AsyncSession, m: Mission, code: str, message: str) -> bool:
    """For good: ``failed`` with the code (an exhausted code when retries ran out)."""
    if not await moved(
        session, m, status=M.FAILED, error_code=code, error_message=message, finished_at=utcnow()
    ):
        return False
    log(
        session,
        m.id,
        E.MISSION_FAILED,
        error_code=code,
        error_message=message,
        retry_count=m.retry_count,
    )
    return True


async def requeued(session: AsyncSession, m: Mission, reason: str) -> bool:
    """Recovery (§5.6): an extraction that cannot be found goes back to the queue."""
    if not await moved(session, m, status=M.QUEUED, checkpoint=Checkpoint.ATRIBUIDO, **_FRESH):
        return False
    await free_worker(session, m)
    log(session, m.id, E.MISSION_QUEUED, queued_by="recovery", reason=reason)
    return True
