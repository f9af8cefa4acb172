"""The agent registry (seed 000 ``LocalWorker``): tokens, statuses and their transitions.

Tokens carry 256 random bits, are shown once and stored as a SHA-256 hash, like API keys.
Every status change is a compare-and-set that writes an ``events`` row; the moves are
the seed's::

    disconnected ──connect──► connected ──task assigned──► busy ──task done──► connected
    busy ──block detected──► blocked ──manual reset──► connected
    connected | busy ──heartbeat timeout / connection lost──► disconnected (tasks reassigned)
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db import audit
from forager.db.engine import Database
from forager.db.models import Agent
from forager.db.queries import get_or_not_found, page
from forager.db.types import utcnow
from forager.errors import Conflict, InvalidRequest, LifecycleConflict, NotFound

TOKEN_PREFIX = "fga_"  # noqa: S105 - a marker, not a secret
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9 -]{0,98}[A-Za-z0-9])?$")


class AgentStatus(StrEnum):
    DISCONNECTED = "disconnected"
    CONNECTED = "connected"
    BUSY = "busy"
    BLOCKED = "blocked"


A = AgentStatus
# Statuses of an agent that holds a live connection and may be given work or timed out.
LIVE = (A.CONNECTED, A.BUSY)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)  # 47 characters, 256 random bits


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidRequest(
            "name must be 1–100 letters, digits, spaces or hyphens, "
            "starting and ending with a letter or digit",
            field="name",
        )
    return name


async def transition(
    session: AsyncSession,
    agent_id: int,
    *,
    from_: Sequence[str],
    to: str,
    event: str | None = None,
    details: dict[str, Any] | None = None,
    **values: Any,
) -> bool:
    """Compare-and-set the status of ``agent_id``; writes the event only if it moved."""
    result = await session.execute(
        update(Agent)
        .where(Agent.id == agent_id, Agent.status.in_(list(from_)))
        .values(status=to, updated_at=utcnow(), **values)
        .execution_options(synchronize_session=False)
    )
    if not getattr(result, "rowcount", 0):
        return False
    audit.record(session, "agent", [agent_id], event or to, {"to": to, **(details or {})})
    return True


# -- registry (API and CLI) -----------------------------------------------------------------


async def create_agent(db: Database, name: str) -> tuple[Agent, str]:
    """Register an agent; its token is returned here and never again."""
    check_name(name)
    token = _new_token()
    async with db.session() as session:
        if await session.scalar(select(Agent.id).where(Agent.name == name)) is not None:
            raise Conflict(f"an agent named {name!r} exists")
        row = Agent(
            name=name,
            token_hash=hash_token(token),
            token_prefix=token[:8],
            status=A.DISCONNECTED,
            tasks_completed_count=0,
            tasks_failed_count=0,
        )
        session.add(row)
        await session.flush()
        audit.record(session, "agent", [row.id], "created", {"name": name})
    return row, token


async def get_agent(session: AsyncSession, agent_id: int) -> Agent:
    return await get_or_not_found(session, Agent, agent_id, f"no agent with id {agent_id}")


async def find_agent(db: Database, ref: str) -> Agent:
    """An agent by id (digits) or by name — what the CLI accepts."""
    async with db.reader() as session:
        if ref.isdigit():
            row = await session.get(Agent, int(ref))
        else:
            row = await session.scalar(select(Agent).where(Agent.name == ref))
    if row is None:
        raise NotFound(f"no agent {ref!r} (give its id or its name)")
    return row


async def list_agents(
    session: AsyncSession, *, status: str | None = None, limit: int = 50, offset: int = 0
) -> tuple[list[Agent], int]:
    query = select(Agent)
    if status is not None:
        query = query.where(Agent.status == status)
    return await page(session, query, Agent.id, limit=limit, offset=offset)


async def revoke_agent(db: Database, agent_id: int) -> Agent:
    """Refuse the agent's token from now on (the hub closes its live connection)."""
    async with db.session() as session:
        row = await get_agent(session, agent_id)
        if row.revoked_at is not None:
            raise Conflict(f"agent {row.name!r} is already revoked")
        previous = row.status
        row.revoked_at = utcnow()
        row.status = A.DISCONNECTED
        audit.record(
            session, "agent", [row.id], "revoked", {"to": A.DISCONNECTED, "from": previous}
        )
        return row


async def rotate_token(db: Database, agent_id: int) -> tuple[Agent, str]:
    """A new token for the agent; the old one is refused from now on."""
    token = _new_token()
    async with db.session() as session:
        row = await get_agent(session, agent_id)
        if row.revoked_at is not None:
            raise Conflict(f"agent {row.name!r} is revoked; create a new agent instead")
        row.token_hash = hash_token(token)
        row.token_prefix = token[:8]
        audit.record(session, "agent", [row.id], "token_rotated")
    return row, token


async def reset_agent(db: Database, agent_id: int) -> Agent:
    """The seed's manual reset: ``blocked → connected``, so the agent gets tasks again."""
    async with db.session() as session:
        row = await get_agent(session, agent_id)
        if not await transition(
            session, agent_id, from_=[A.BLOCKED], to=A.CONNECTED, event="reset", blocked_reason=None
        ):
            raise LifecycleConflict(
                f"agent {row.name!r} is {row.status}; only a blocked agent can be reset",
                current_status=row.status,
            )
        await session.refresh(row)
        return row


async def authenticate(db: Database, token: str) -> Agent | None:
    """The active (not revoked) agent holding ``token``, or None."""
    digest = hash_token(token)
    async with db.reader() as session:
        row = await session.scalar(
            select(Agent).where(Agent.token_hash == digest, Agent.revoked_at.is_(None))
        )
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        return None
    return row
