"""The sessions API's service layer (issue 33): a domain's sticky sessions listed (never their
cookies), one or all retired by an operator, each retirement an event."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.engine import Database
from forager.db.models import Domain, DomainSession
from forager.db.types import utcnow
from forager.domains.sticky_sessions import ACTIVE, RETIRED, retire_event
from forager.errors import Conflict, NotFound

OPERATOR = "operator"


def shown(row: DomainSession, now: datetime) -> dict[str, Any]:
    """What the API shows of a session: no cookie, only whether it has any."""
    leased = row.lease_owner is not None and (
        row.lease_expires_at is None or row.lease_expires_at > now
    )
    return {
        "id": row.id,
        "domain_id": row.domain_id,
        "state": row.state,
        "uses": row.uses,
        "error_score": row.error_score,
        "age_seconds": round(((row.retired_at or now) - row.created_at).total_seconds(), 3),
        "proxy_id": row.proxy_id,
        "leased": leased,
        "has_cookies": row.cookies_sealed is not None,
        "created_at": row.created_at,
        "last_used_at": row.last_used_at,
        "retired_at": row.retired_at,
        "retired_reason": row.retired_reason,
    }


async def _domain(session: AsyncSession, domain_id: int) -> None:
    if await session.scalar(select(Domain.id).where(Domain.id == domain_id)) is None:
        raise NotFound(f"domain {domain_id} not found")


async def list_page(
    session: AsyncSession, domain_id: int, state: str | None, *, limit: int, offset: int
) -> tuple[Sequence[DomainSession], int]:
    """A domain's sessions, newest first (``state``: only those)."""
    await _domain(session, domain_id)
    where = [DomainSession.domain_id == domain_id]
    if state is not None:
        where.append(DomainSession.state == state)
    total = await session.scalar(select(func.count(DomainSession.id)).where(*where)) or 0
    rows = await session.scalars(
        select(DomainSession)
        .where(*where)
        .order_by(DomainSession.id.desc())
        .limit(limit)
        .offset(offset)
    )
    return list(rows), total


def _retire(now: datetime) -> dict[str, Any]:
    return {
        "state": RETIRED,
        "retired_at": now,
        "retired_reason": OPERATOR,
        "cookies_sealed": None,
        "lease_owner": None,
        "lease_expires_at": None,
    }


async def retire_one(db: Database, domain_id: int, session_id: int) -> DomainSession:
    """Retire one active session now (a fetch holding it keeps nothing of its answer);
    ``Conflict`` when it is retired already."""
    async with db.session() as session:
        await _domain(session, domain_id)
        row = await session.scalar(
            select(DomainSession).where(
                DomainSession.id == session_id, DomainSession.domain_id == domain_id
            )
        )
        if row is None:
            raise NotFound(f"session {session_id} of domain {domain_id} not found")
        result = await session.execute(
            update(DomainSession)
            .where(DomainSession.id == session_id, DomainSession.state == ACTIVE)
            .values(**_retire(utcnow()))
            .execution_options(synchronize_session=False)
        )
        if not getattr(result, "rowcount", 0):
            raise Conflict(f"session {session_id} is retired already")
        retire_event(session, domain_id, session_id, OPERATOR, row.uses)
        await session.refresh(row)
        return row


async def retire_all(db: Database, domain_id: int) -> int:
    """Retire every active session of the domain; how many there were."""
    async with db.session() as session:
        await _domain(session, domain_id)
        rows = (
            await session.execute(
                update(DomainSession)
                .where(DomainSession.domain_id == domain_id, DomainSession.state == ACTIVE)
                .values(**_retire(utcnow()))
                .returning(DomainSession.id, DomainSession.uses)
                .execution_options(synchronize_session=False)
            )
        ).all()
        for session_id, uses in rows:
            retire_event(session, domain_id, session_id, OPERATOR, uses)
        return len(rows)
