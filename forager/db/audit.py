"""Audit events (the ``events`` table), buffered per transaction and written in one insert."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.models import Event
from forager.db.types import utcnow

_PENDING = "forager.pending_events"


def record(
    session: AsyncSession,
    entity_type: str,
    entity_ids: Iterable[int | str],
    event: str,
    details: dict[str, Any] | None = None,
) -> None:
    """Queue one event row per entity; ``flush`` writes them before the transaction commits."""
    now = utcnow()
    rows: list[dict[str, Any]] = session.info.setdefault(_PENDING, [])
    rows.extend(
        {
            "entity_type": entity_type,
            "entity_id": str(entity_id),
            "event": event,
            "details": details,
            "created_at": now,
        }
        for entity_id in entity_ids
    )


async def flush(session: AsyncSession) -> None:
    """Write the queued events of ``session`` (called by ``Database.session`` before commit)."""
    rows = session.info.pop(_PENDING, None)
    if rows:
        await session.execute(insert(Event), rows)
