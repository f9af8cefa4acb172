"""What an ``auto`` domain remembers of its fetchers: the one that last worked, why, since when,
and when a cheaper one is tried again (the probe). Kept in the domain's row, so every process
reads the same memory; each write is a compare-and-set on what the writer read, and each change
an event. The climb that uses it is ``forager.worker.escalation``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, or_, select, update

from forager.db import audit
from forager.db.engine import Database
from forager.db.models import Domain
from forager.db.types import utcnow
from forager.fetch.fetcher_set import AUTO, FETCHER_KINDS

RUNGS = FETCHER_KINDS  # cheapest first: http, impersonate, browser
CHEAPEST = RUNGS[0]
_REASON_CHARS = 500  # the column's size


@dataclass(frozen=True, slots=True)
class Memory:
    """An ``auto`` domain's fetcher that last worked and when a cheaper one is tried again."""

    rung: str
    probe_at: datetime | None

    def probe_due(self, now: datetime) -> bool:
        return self.rung != CHEAPEST and (self.probe_at is None or self.probe_at <= now)


async def remembered(db: Database, domain_id: int) -> Memory:
    """The domain's memory as stored now (the cheapest fetcher when it has none)."""
    async with db.reader() as session:
        row = (
            await session.execute(
                select(Domain.auto_fetcher, Domain.auto_fetcher_probe_at).where(
                    Domain.id == domain_id
                )
            )
        ).first()
    if row is None or row.auto_fetcher not in RUNGS:
        return Memory(CHEAPEST, None)
    return Memory(row.auto_fetcher, row.auto_fetcher_probe_at)


async def claim_probe(db: Database, domain_id: int, memory: Memory, interval: float) -> bool:
    """Take the domain's due probe: True for the one caller, in any process, whose
    compare-and-set moved the next probe ``interval`` seconds on; every other caller, False."""
    now = utcnow()
    async with db.session() as session:
        won = await session.scalar(
            update(Domain)
            .where(
                Domain.id == domain_id,
                Domain.fetcher == AUTO,
                _remembered_is(memory.rung),
                or_(Domain.auto_fetcher_probe_at.is_(None), Domain.auto_fetcher_probe_at <= now),
            )
            .values(auto_fetcher_probe_at=now + timedelta(seconds=interval))
            .returning(Domain.id)
        )
    return won is not None


async def remember(
    db: Database,
    domain_id: int,
    was: str,
    now_works: str,
    reason: str,
    *,
    url: str,
    probe: bool,
    interval: float,
) -> bool:
    """Move the memory from ``was`` to ``now_works`` (compare-and-set: False when another
    process changed it first, or an operator pinned a fetcher), with the event saying why."""
    now = utcnow()
    reason = reason[:_REASON_CHARS]
    async with db.session() as session:
        moved = await session.scalar(
            update(Domain)
            .where(Domain.id == domain_id, Domain.fetcher == AUTO, _remembered_is(was))
            .values(
                auto_fetcher=now_works,
                auto_fetcher_reason=reason,
                auto_fetcher_changed_at=now,
                auto_fetcher_probe_at=(
                    None if now_works == CHEAPEST else now + timedelta(seconds=interval)
                ),
            )
            .returning(Domain.id)
        )
        if moved is not None:
            up = RUNGS.index(now_works) > RUNGS.index(was)
            details: dict[str, Any] = {
                "from": was,
                "to": now_works,
                "reason": reason,
                "url": url,
                "probe": probe,
            }
            event = "fetcher_escalated" if up else "fetcher_lowered"
            audit.record(session, "domain", [domain_id], event, details)
    return moved is not None


async def probe_kept(db: Database, domain_id: int, rung: str, reason: str, *, url: str) -> None:
    """A probe found nothing cheaper that works: the event says so (the memory stays)."""
    details = {"kept": rung, "reason": reason[:_REASON_CHARS], "url": url}
    async with db.session() as session:
        audit.record(session, "domain", [domain_id], "fetcher_probed", details)


def _remembered_is(rung: str) -> ColumnElement[bool]:
    """The stored memory is ``rung`` (none stored: the cheapest)."""
    if rung == CHEAPEST:
        return or_(Domain.auto_fetcher.is_(None), Domain.auto_fetcher == CHEAPEST)
    return Domain.auto_fetcher == rung


def forget(domain: Domain) -> None:
    """An operator set the fetcher: what ``auto`` learnt before starts again from the cheapest."""
    domain.auto_fetcher = None
    domain.auto_fetcher_reason = None
    domain.auto_fetcher_changed_at = None
    domain.auto_fetcher_probe_at = None
