"""Every state change of a worker service (seed §4.2), each a compare-and-set.

``idle → initializing → ready → scraping → ready``, ``error`` after a failed session and back
to ``idle`` once reset. ``current_mission_id`` names the mission the service works on; it stays
set while the service opens a new session to retry that mission.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.models import WorkerService
from forager.db.types import utcnow
from forager.missions.states import WorkerStatus as W


async def move(
    session: AsyncSession,
    worker_id: int,
    *,
    from_: Sequence[str] | None = None,
    mission: int | bool | None = False,
    **values: Any,
) -> bool:
    """``UPDATE worker_services … WHERE id = … [AND status IN from_] [AND current_mission_id
    = mission]``; ``mission=None`` requires no mission, ``False`` (default) does not look."""
    conditions: list[Any] = [WorkerService.id == worker_id]
    if from_ is not None:
        conditions.append(WorkerService.status.in_(list(from_)))
    if mission is None:
        conditions.append(WorkerService.current_mission_id.is_(None))
    elif mission is not False:
        conditions.append(WorkerService.current_mission_id == mission)
    result = await session.execute(
        update(WorkerService)
        .where(*conditions)
        .values(updated_at=utcnow(), **values)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


async def begin_session(
    session: AsyncSession, worker_id: int, proxy_id: int, now: datetime
) -> bool:
    return await move(
        session,
        worker_id,
        from_=[W.IDLE],
        status=W.INITIALIZING,
        session_started_at=now,
        last_proxy_id=proxy_id,
    )


async def session_ready(session: AsyncSession, worker_id: int) -> bool:
    return await move(
        session,
        worker_id,
        from_=[W.INITIALIZING],
        status=W.READY,
        session_count=0,
        last_error_code=None,
    )


async def session_failed(session: AsyncSession, worker_id: int, code: str) -> bool:
    return await move(
        session,
        worker_id,
        from_=[W.IDLE, W.INITIALIZING, W.READY, W.SCRAPING],
        status=W.ERROR,
        last_error_code=code,
        last_error_at=utcnow(),
    )


async def to_idle(session: AsyncSession, worker_id: int, *, keep_mission: bool) -> bool:
    """End of a session: ``idle`` with a fresh count (a mission being retried stays)."""
    extra: dict[str, Any] = {} if keep_mission else {"current_mission_id": None}
    return await move(
        session, worker_id, status=W.IDLE, session_count=0, session_started_at=None, **extra
    )


async def assign(session: AsyncSession, worker_id: int, mission_id: int) -> bool:
    """Seed §5.2 step 2.3.3 (or a retried mission resuming after its new session)."""
    return await move(
        session,
        worker_id,
        from_=[W.READY],
        status=W.SCRAPING,
        current_mission_id=mission_id,
    )


async def release(
    session: AsyncSession, worker_id: int, mission_id: int, *, counted: bool = True
) -> bool:
    """Seed §5.2 step 2.6: ready for the next mission; ``counted`` spends one of the session's."""
    extra: dict[str, Any] = {"session_count": WorkerService.session_count + 1} if counted else {}
    return await move(
        session,
        worker_id,
        from_=[W.SCRAPING],
        mission=mission_id,
        status=W.READY,
        current_mission_id=None,
        **extra,
    )


async def drop_mission(session: AsyncSession, worker_id: int, mission_id: int) -> bool:
    """The mission left the service while it was not scraping (a session retry that ended)."""
    return await move(session, worker_id, mission=mission_id, current_mission_id=None)
