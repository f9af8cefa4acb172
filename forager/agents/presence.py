"""What the hub writes about connected agents: connects, heartbeats, busy/idle, blocks, losses.

Each status change goes through ``admin.transition`` (compare-and-set plus an event), so
a reset or a revoke racing the hub never gets overwritten.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.agents.admin import LIVE, A, transition
from forager.db.engine import Database
from forager.db.models import Agent
from forager.db.types import utcnow


async def connected(db: Database, agent_id: int, *, version: str, ip: str | None) -> str:
    """The agent opened a connection; returns its status (a blocked agent stays blocked)."""
    now = utcnow()
    seen = {"last_heartbeat_at": now, "agent_version": version[:50], "external_ip": ip}
    async with db.session() as session:
        # From a live status too: after a server crash the row may still say connected/busy.
        if await transition(
            session,
            agent_id,
            from_=[A.DISCONNECTED, *LIVE],
            to=A.CONNECTED,
            event="connected",
            details={"version": version[:50]},
            **seen,
        ):
            return A.CONNECTED
        await _touch(session, agent_id, **seen)
        status = await session.scalar(select(Agent.status).where(Agent.id == agent_id))
        return str(status)


async def heartbeat(db: Database, agent_id: int, *, ip: str | None, isp: str | None) -> str | None:
    """Record a heartbeat; returns the status (None: the agent was revoked meanwhile)."""
    values: dict[str, Any] = {"last_heartbeat_at": utcnow()}
    if ip:
        values["external_ip"] = ip[:45]
    if isp:
        values["isp_name"] = isp[:100]
    async with db.session() as session:
        await _touch(session, agent_id, **values)
        row = (
            await session.execute(
                select(Agent.status, Agent.revoked_at).where(Agent.id == agent_id)
            )
        ).one_or_none()
    if row is None or row.revoked_at is not None:
        return None
    return str(row.status)


async def busy(db: Database, agent_id: int) -> None:
    """``connected → busy``: the agent has been given a task."""
    async with db.session() as session:
        await transition(session, agent_id, from_=[A.CONNECTED], to=A.BUSY, event="busy")


async def finished(db: Database, agent_id: int, *, completed: int, failed: int, idle: bool) -> None:
    """Count a task's outcome; ``idle`` moves ``busy → connected`` (nothing left in flight)."""
    async with db.session() as session:
        counts: dict[str, Any] = {
            "tasks_completed_count": Agent.tasks_completed_count + completed,
            "tasks_failed_count": Agent.tasks_failed_count + failed,
        }
        if not (
            idle and await transition(session, agent_id, from_=[A.BUSY], to=A.CONNECTED, **counts)
        ):
            await _touch(session, agent_id, **counts)


async def blocked(db: Database, agent_id: int, reason: str) -> bool:
    """``busy | connected → blocked``: the site showed this agent a CAPTCHA or a block page."""
    async with db.session() as session:
        return await transition(
            session,
            agent_id,
            from_=LIVE,
            to=A.BLOCKED,
            details={"reason": reason[:500]},
            blocked_reason=reason[:500],
        )


async def disconnected(db: Database, agent_id: int, reason: str, tasks: list[int]) -> None:
    """``connected | busy → disconnected``; ``tasks`` are those returned to the queue."""
    async with db.session() as session:
        await transition(
            session,
            agent_id,
            from_=LIVE,
            to=A.DISCONNECTED,
            details={"reason": reason, "tasks_reassigned": tasks},
        )


async def sweep_silent(db: Database, silent_seconds: float, exclude: set[int]) -> list[int]:
    """Agents marked live whose heartbeats stopped (their server died): mark them disconnected."""
    limit = utcnow() - timedelta(seconds=silent_seconds)
    silent = select(Agent.id).where(Agent.status.in_(LIVE), Agent.last_heartbeat_at < limit)
    async with db.reader() as session:  # most sweeps find nothing: no write lock for them
        ids = [i for i in await session.scalars(silent) if i not in exclude]
    if not ids:
        return []
    async with db.session() as session:
        for agent_id in ids:
            await transition(
                session,
                agent_id,
                from_=LIVE,
                to=A.DISCONNECTED,
                details={"reason": "heartbeat timeout"},
            )
    return ids


async def still_valid(db: Database, tokens: dict[int, str]) -> set[int]:
    """Of ``{agent_id: token_hash}``, the agents whose token is still current and not revoked."""
    if not tokens:
        return set()
    async with db.reader() as session:
        rows = await session.execute(
            select(Agent.id, Agent.token_hash).where(
                Agent.id.in_(list(tokens)), Agent.revoked_at.is_(None)
            )
        )
        return {row.id for row in rows if tokens.get(row.id) == row.token_hash}


async def _touch(session: AsyncSession, agent_id: int, **values: Any) -> None:
    await session.execute(
        update(Agent)
        .where(Agent.id == agent_id)
        .values(updated_at=utcnow(), **values)
        .execution_options(synchronize_session=False)
    )
