"""The crawl-delay gate: a domain is asked at most once per delay, by every process together.

The gate is one column, ``domains.next_fetch_at``: open when it is past (or unset), closed until
then. A claim that hands out a task of a domain with a delay closes it until the lease runs out
(``close_until``), so a worker that dies before sending leaves it closed only that long; the
request being sent reopens it ``delay`` later (``open_after``), measured from the moment the
request left, so the delay holds between requests as the site sees them. A request outside the
task path (robots.txt goes with the page's turn; a product image takes its own) takes the turn
with ``take``. Every function runs in the caller's transaction.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db import breakers
from forager.db.models import Domain
from forager.db.types import utcnow


def admits(now: Any, breaker_cutoff: Any) -> list[Any]:
    """SQL conditions: the domain may be asked at ``now`` (its gate is open, its breaker not
    open: ``breakers.reopen_cutoff``); datetimes, or bound parameters of them (the claim's
    statements are built once)."""
    return [
        or_(Domain.next_fetch_at.is_(None), Domain.next_fetch_at <= now),
        breakers.allows_since(Domain, breaker_cutoff),  # an open breaker: not claimed
    ]


async def close_until(session: AsyncSession, domain_id: int, until: datetime) -> None:
    """A task of the domain was handed out: closed until its request is sent (or ``until``)."""
    await session.execute(
        update(Domain)
        .where(Domain.id == domain_id)
        .values(next_fetch_at=until)
        .execution_options(synchronize_session=False)
    )


async def open_after(session: AsyncSession, domain_id: int, delay_seconds: float) -> None:
    """A request to the domain has been sent: the domain opens again ``delay_seconds`` later."""
    await session.execute(
        update(Domain)
        .where(Domain.id == domain_id)
        .values(next_fetch_at=utcnow() + timedelta(seconds=delay_seconds))
        .execution_options(synchronize_session=False)
    )


async def take(session: AsyncSession, domain_id: int, hold_seconds: float) -> datetime | None:
    """A request outside the task path (a product image) takes the domain's turn: an open gate
    is closed for ``hold_seconds`` (``open_after`` reopens it once the request is sent), as a
    claim closes it. Returns None when taken, else when the gate opens."""
    now = utcnow()
    taken = await session.scalar(
        update(Domain)
        .where(
            Domain.id == domain_id,
            or_(Domain.next_fetch_at.is_(None), Domain.next_fetch_at <= now),
        )
        .values(next_fetch_at=now + timedelta(seconds=hold_seconds))
        .returning(Domain.id)
        .execution_options(synchronize_session=False)
    )
    if taken is not None:
        return None
    opens = await session.scalar(select(Domain.next_fetch_at).where(Domain.id == domain_id))
    return opens or now
