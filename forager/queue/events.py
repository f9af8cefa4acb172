"""Writing audit events (the ``events`` table) from inside a transaction."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.models import Event
from forager.db.types import utcnow


async def record(
    session: AsyncSession,
    entity_type: str,
    entity_ids: Iterable[int | str],
    event: str,
    details: dict[str, Any] | None = None,
) -> None:
    """One event row per entity, all with the same name and details."""
    now = utcnow()
    rows = [
        {
            "entity_type": entity_type,
            "entity_id": str(entity_id),
            "event": event,
            "details": details,
            "created_at": now,
        }
        for entity_id in entity_ids
    ]
    if rows:
        await session.execute(insert(Event), rows)
