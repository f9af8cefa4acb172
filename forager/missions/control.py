"""The ``mission_control`` row: operator settings, the run switch and the leader lease.

Seed 003 runs one orchestrator loop, started by the operator ("Iniciar") and ending by itself.
Several ``forager serve`` processes may share one database, so the loop runs where the lease
is: ``leader_id`` with ``leader_expires_at``, taken and renewed by compare-and-set. A holder
that dies stops renewing, and another process takes over once the lease has expired.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db import audit
from forager.db.dialect import insert_ignoring_conflicts
from forager.db.engine import Database
from forager.db.models import Mission, MissionControl, WorkerService, Writer
from forager.db.types import utcnow
from forager.missions.states import MissionStatus

ROW = 1
ENTITY = "mission_control"


@dataclass(frozen=True, slots=True)
class ControlView:
    session_limit: int
    max_retries: int
    run_requested: bool
    run_generation: int
    leader_id: str | None
    leader_expires_at: datetime | None
    run_started_at: datetime | None
    run_ended_at: datetime | None

    def leading(self, now: datetime) -> bool:
        """Whether some process holds a live lease now."""
        return self.leader_id is not None and (
            self.leader_expires_at is not None and self.leader_expires_at > now
        )


async def _ensure(session: AsyncSession) -> None:
    """The row exists after migration 0012; recreate it if someone deleted it."""
    insert = insert_ignoring_conflicts(session, MissionControl.__table__, on=["id"])
    await session.execute(
        insert.values(
            id=ROW,
            session_limit=5,
            max_retries=2,
            run_requested=False,
            run_generation=0,
            updated_at=utcnow(),
        )
    )


async def read(db: Database) -> ControlView:
    async with db.reader() as session:
        row = await session.get(MissionControl, ROW)
    if row is None:
        async with db.session() as session:
            await _ensure(session)
        return await read(db)
    return ControlView(
        row.session_limit,
        row.max_retries,
        row.run_requested,
        row.run_generation,
        row.leader_id,
        row.leader_expires_at,
        row.run_started_at,
        row.run_ended_at,
    )


async def update_settings(
    db: Database, *, session_limit: int | None, max_retries: int | None
) -> ControlView:
    """Seed §8.1: the two values an operator sets from the interface."""
    values = {
        k: v
        for k, v in (("session_limit", session_limit), ("max_retries", max_retries))
        if v is not None
    }
    async with db.session() as session:
        await _ensure(session)
        if values:
            await session.execute(
                update(MissionControl).where(MissionControl.id == ROW).values(**values)
            )
            audit.record(session, ENTITY, [ROW], "settings_changed", values)
    return await read(db)


async def why_nothing_would_run(session: AsyncSession) -> str | None:
    """Why a run started now would do nothing (no mission queued or running, no active worker
    service to scrape or writer to store), as what to configure; None when it can work."""
    waiting = await session.scalar(
        select(Mission.id)
        .where(Mission.status.in_([MissionStatus.QUEUED, MissionStatus.RUNNING]))
        .limit(1)
    )
    if waiting is None:
        return (
            "nothing to run: no mission is queued. Create missions and queue them first "
            "(Missions → Queue on the dashboard, or POST /api/missions with queue: true)"
        )
    services: tuple[tuple[type[WorkerService | Writer], str, str, str], ...] = (
        (
            WorkerService,
            "worker service (it scrapes a mission)",
            "Worker services",
            "worker-services",
        ),
        (Writer, "writer (it stores what was scraped)", "Writers", "writers"),
    )
    for model, what, section, path in services:
        active = await session.scalar(select(model.id).where(model.active.is_(True)).limit(1))
        if active is None:
            return (
                f"no active {what}: add one first (Missions → {section} on the dashboard, "
                f"or POST /api/{path})"
            )
    return None


async def request_run(db: Database, by: str) -> ControlView:
    """ "Iniciar": ask for a run; a new generation, so a run ending now does not swallow it."""
    async with db.session() as session:
        await _ensure(session)
        await session.execute(
            update(MissionControl)
            .where(MissionControl.id == ROW)
            .values(run_requested=True, run_generation=MissionControl.run_generation + 1)
        )
        audit.record(session, ENTITY, [ROW], "run_requested", {"by": by})
    return await read(db)


async def request_stop(db: Database, by: str) -> ControlView:
    """Stop the loop (missions in flight stay as they are and are picked up by the next run)."""
    async with db.session() as session:
        await _ensure(session)
        await session.execute(
            update(MissionControl).where(MissionControl.id == ROW).values(run_requested=False)
        )
        audit.record(session, ENTITY, [ROW], "stop_requested", {"by": by})
    return await read(db)


async def finish_run(db: Database, owner: str, generation: int) -> bool:
    """The loop ran out of work: switch the run off unless an "Iniciar" came meanwhile."""
    now = utcnow()
    async with db.session() as session:
        result = await session.execute(
            update(MissionControl)
            .where(
                MissionControl.id == ROW,
                MissionControl.leader_id == owner,
                MissionControl.run_generation == generation,
            )
            .values(run_requested=False, run_ended_at=now)
        )
        done = bool(getattr(result, "rowcount", 0))
        if done:
            audit.record(session, ENTITY, [ROW], "run_finished", {"leader": owner})
    return done


async def acquire(db: Database, owner: str, seconds: float) -> bool:
    """Take or renew the leader lease (compare-and-set); False while another holds it."""
    now = utcnow()
    async with db.session() as session:
        await _ensure(session)
        held = await session.scalar(
            select(MissionControl.leader_id).where(MissionControl.id == ROW)
        )
        result = await session.execute(
            update(MissionControl)
            .where(
                MissionControl.id == ROW,
                or_(
                    MissionControl.leader_id.is_(None),
                    MissionControl.leader_id == owner,
                    MissionControl.leader_expires_at < now,
                ),
            )
            .values(leader_id=owner, leader_expires_at=now + timedelta(seconds=seconds))
        )
        taken = bool(getattr(result, "rowcount", 0))
        if taken and held != owner:
            await session.execute(
                update(MissionControl).where(MissionControl.id == ROW).values(run_started_at=now)
            )
            audit.record(
                session, ENTITY, [ROW], "leader_acquired", {"leader": owner, "previous": held}
            )
    return taken


async def release(db: Database, owner: str) -> None:
    """Give the lease up (a clean stop), so another process may lead at once."""
    async with db.session() as session:
        await session.execute(
            update(MissionControl)
            .where(MissionControl.id == ROW, MissionControl.leader_id == owner)
            .values(leader_id=None, leader_expires_at=None)
        )
