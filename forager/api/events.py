"""The audit log: every recorded event, newest first, filterable by entity and event type.

The log grows by millions of rows (every task move is an event), so a page's total counts at
most ``COUNT_CAP`` rows past its offset: an exact count of 1,000,000 events reads them all
(80-180 ms on PostgreSQL, issue 35), 10,000 of them take a millisecond or two. Past the cap
the total is a lower bound and ``total_exact`` is false, as for a broad product search.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import Select, func, literal, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.api.deps import PagingDep, ReadSessionDep
from forager.api.event_schemas import AuditEvent
from forager.api.pages import Page
from forager.api.wire import Timestamp
from forager.db.models import Event

COUNT_CAP = 10_000
router = APIRouter(prefix="/api/events", tags=["events"])


@router.get("", operation_id="list_events")
async def list_events(
    session: ReadSessionDep,
    paging: PagingDep,
    entity_type: Annotated[
        str | None, Query(max_length=30, description="e.g. task, domain, proxy, api_key.")
    ] = None,
    entity_id: Annotated[str | None, Query(max_length=64, description="The entity's id.")] = None,
    event: Annotated[str | None, Query(max_length=50, description="e.g. paused.")] = None,
    before_id: Annotated[
        int | None, Query(ge=1, le=2**63 - 1, description="Only events older than this id.")
    ] = None,
    since: Annotated[Timestamp | None, Query(description="At or after this time.")] = None,
) -> Page[AuditEvent]:
    """Events, newest first, with the total count for pagination (exact up to 10,000 events
    past ``offset``; beyond, a lower bound with ``total_exact`` false)."""
    query = select(Event)
    if entity_type is not None:
        query = query.where(Event.entity_type == entity_type)
    if entity_id is not None:
        query = query.where(Event.entity_id == entity_id)
    if event is not None:
        query = query.where(Event.event == event)
    if before_id is not None:
        query = query.where(Event.id < before_id)
    if since is not None:
        query = query.where(Event.created_at >= since)
    rows = await session.scalars(
        query.order_by(Event.id.desc()).limit(paging.limit).offset(paging.offset)
    )
    total, exact = await _total(session, query, paging.offset)
    return Page(
        items=[AuditEvent.model_validate(e) for e in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
        total_exact=exact,
    )


async def _total(session: AsyncSession, query: Select[Any], offset: int) -> tuple[int, bool]:
    """How many rows ``query`` matches, and whether exactly: the offset plus the rows past it,
    counted up to ``COUNT_CAP`` (one more says there are more). A page past the end counts
    the rows before it (no more than the offset's own scan reads)."""

    async def count(offset: int, limit: int) -> int:
        rows = query.with_only_columns(literal(1), maintain_column_froms=True)
        rows = rows.offset(offset).limit(limit)
        return await session.scalar(select(func.count()).select_from(rows.subquery())) or 0

    past = await count(offset, COUNT_CAP + 1)
    if past == 0 and offset > 0:
        return await count(0, offset), True
    return offset + min(past, COUNT_CAP), past <= COUNT_CAP
