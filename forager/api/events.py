"""The audit log: every recorded event, newest first, filterable by entity and event type.

The log grows by millions of rows (every task move is an event), so a page's total counts at
most ``COUNT_CAP`` rows past its offset: an exact count of 1,000,000 events reads them all
(80-180 ms on PostgreSQL, issue 35), 10,000 of them take a millisecond or two. Past the cap
the total is a lower bound and ``total_exact`` is false, as for a broad product search.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import select

from forager.api.deps import PagingDep, ReadSessionDep
from forager.api.event_schemas import AuditEvent
from forager.api.pages import Page
from forager.api.wire import Timestamp
from forager.db.models import Event
from forager.db.queries import page_capped

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
    rows, total, exact = await page_capped(
        session, query, Event.id.desc(), limit=paging.limit, offset=paging.offset, cap=COUNT_CAP
    )
    return Page(
        items=[AuditEvent.model_validate(e) for e in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
        total_exact=exact,
    )
