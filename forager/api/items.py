"""Items: list, search, export and inspect records that are not products, with their versions."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from forager.api.deps import EntityId, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.downloads import described, download
from forager.api.item_schemas import ItemDetail, ItemPublic, ItemVersionPublic
from forager.api.pages import Page
from forager.api.wire import Timestamp
from forager.db.models import Item, ItemVersion
from forager.db.queries import get_or_not_found, page
from forager.items import export, search
from forager.items.records import item_record
from forager.items.search import ItemFilters
from forager.items.versions import with_changes
from forager.parse.items import KIND

router = APIRouter(prefix="/api/items", tags=["items"])


def item_filters(
    kind: Annotated[
        str | None, Query(pattern=KIND, max_length=50, description="Item kind, e.g. ad.")
    ] = None,
    domain: Annotated[str | None, Query(max_length=255, description="Domain name.")] = None,
    changed_since: Annotated[
        Timestamp | None, Query(description="Data changed (or first seen) at or after this time.")
    ] = None,
    task_id: Annotated[
        int | None, Query(ge=1, le=2**63 - 1, description="Last read by this task.")
    ] = None,
    q: Annotated[
        str | None,
        Query(
            max_length=500,
            description="Text search: every word must appear in the item's data (any case).",
        ),
    ] = None,
) -> ItemFilters:
    return ItemFilters(kind=kind, domain=domain, changed_since=changed_since, task_id=task_id, q=q)


FiltersDep = Annotated[ItemFilters, Depends(item_filters)]


@router.get("", operation_id="list_items")
async def list_items(
    session: ReadSessionDep, paging: PagingDep, filters: FiltersDep
) -> Page[ItemPublic]:
    """Items, most recently changed first."""
    query, count = search.list_query(filters)
    total = await session.scalar(count) or 0
    items = await session.scalars(query.limit(paging.limit).offset(paging.offset))
    return Page(
        items=[ItemPublic(**item_record(i)) for i in items],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.get(
    "/export.csv",
    operation_id="export_items_csv",
    response_class=StreamingResponse,
    responses=described("csv", "One row per item."),
)
async def export_items_csv(runtime: RuntimeDep, filters: FiltersDep) -> StreamingResponse:
    """Every matching item as CSV (header row; ``data`` as one JSON cell), by id."""
    return download(export.stream(runtime.db, filters, "csv"), "csv", "items")


@router.get(
    "/export.jsonl",
    operation_id="export_items_jsonl",
    response_class=StreamingResponse,
    responses=described("jsonl", "One item record per line."),
)
async def export_items_jsonl(runtime: RuntimeDep, filters: FiltersDep) -> StreamingResponse:
    """Every matching item as JSON Lines (one item record per line), by id."""
    return download(export.stream(runtime.db, filters, "jsonl"), "jsonl", "items")


# The detail shows this many of the newest versions; /versions pages through all.
DETAIL_ROWS = 50
_NO_ITEM: dict[int | str, dict[str, Any]] = {404: {"description": "No such item."}}


async def _item_or_404(session: ReadSessionDep, item_id: int) -> Item:
    return await get_or_not_found(session, Item, item_id, f"item {item_id} does not exist")


async def _versions(
    session: ReadSessionDep, item_id: int, limit: int, offset: int
) -> tuple[list[ItemVersionPublic], int]:
    """A page of versions, newest first, each with what it changed (one row more is read for
    the last one's comparison)."""
    query = select(ItemVersion).where(ItemVersion.item_id == item_id)
    rows, total = await page(
        session, query, ItemVersion.version.desc(), limit=limit + 1, offset=offset
    )
    shown = with_changes(rows)[:limit]
    return [ItemVersionPublic(**v) for v in shown], total


@router.get("/{item_id:int}", operation_id="get_item", responses=_NO_ITEM)
async def get_item(item_id: EntityId, session: ReadSessionDep) -> ItemDetail:
    """One item with its newest versions (newest first) and what each changed."""
    item = await _item_or_404(session, item_id)
    versions, total = await _versions(session, item_id, DETAIL_ROWS, 0)
    return ItemDetail(**item_record(item), versions=versions, versions_total=total)


@router.get("/{item_id:int}/versions", operation_id="list_item_versions", responses=_NO_ITEM)
async def list_item_versions(
    item_id: EntityId, session: ReadSessionDep, paging: PagingDep
) -> Page[ItemVersionPublic]:
    """An item's versions, newest first, a page at a time, each with what it changed."""
    await _item_or_404(session, item_id)
    versions, total = await _versions(session, item_id, paging.limit, paging.offset)
    return Page(items=versions, total=total, limit=paging.limit, offset=paging.offset)
