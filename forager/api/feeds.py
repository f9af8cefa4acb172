"""Feeds (issue 35): scheduled incremental exports; their runs; run one now."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from forager.api.deps import EntityId, PagingDep, RuntimeDep
from forager.api.feed_schemas import FeedCreate, FeedPublic, FeedRunPublic, FeedUpdate
from forager.api.pages import Page
from forager.feeds import admin

router = APIRouter(prefix="/api/feeds", tags=["feeds"])

_NO_FEED: dict[int | str, dict[str, Any]] = {404: {"description": "No such feed."}}
_NAME_TAKEN: dict[int | str, dict[str, Any]] = {409: {"description": "The name is taken."}}


@router.post("", operation_id="create_feed", status_code=201, responses=_NAME_TAKEN)
async def create_feed(body: FeedCreate, runtime: RuntimeDep) -> FeedPublic:
    """Create a feed; its first run is due at once and exports every row so far."""
    feed = await admin.create(runtime.db, admin.FeedSpec(**body.model_dump()))
    return FeedPublic.model_validate(feed)


@router.get("", operation_id="list_feeds")
async def list_feeds(runtime: RuntimeDep, paging: PagingDep) -> Page[FeedPublic]:
    """Feeds, oldest first."""
    rows, total = await admin.list_page(runtime.db, limit=paging.limit, offset=paging.offset)
    return Page(
        items=[FeedPublic.model_validate(f) for f in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.get("/{feed_id:int}", operation_id="get_feed", responses=_NO_FEED)
async def get_feed(feed_id: EntityId, runtime: RuntimeDep) -> FeedPublic:
    return FeedPublic.model_validate(await admin.get(runtime.db, feed_id))


@router.patch("/{feed_id:int}", operation_id="update_feed", responses={**_NO_FEED, **_NAME_TAKEN})
async def update_feed(feed_id: EntityId, body: FeedUpdate, runtime: RuntimeDep) -> FeedPublic:
    """Change a feed; its cursor stays (the next run starts where the last one ended)."""
    changes = body.model_dump(exclude_unset=True)
    return FeedPublic.model_validate(await admin.change(runtime.db, feed_id, changes))


@router.delete("/{feed_id:int}", operation_id="delete_feed", status_code=204, responses=_NO_FEED)
async def delete_feed(feed_id: EntityId, runtime: RuntimeDep) -> Response:
    """Delete a feed and its runs' history; the files it wrote stay."""
    await admin.remove(runtime.db, feed_id)
    return Response(status_code=204)


@router.get("/{feed_id:int}/runs", operation_id="list_feed_runs", responses=_NO_FEED)
async def list_feed_runs(
    feed_id: EntityId, runtime: RuntimeDep, paging: PagingDep
) -> Page[FeedRunPublic]:
    """The feed's runs, newest first: range, rows, bytes, file, error."""
    rows, total = await admin.runs(runtime.db, feed_id, limit=paging.limit, offset=paging.offset)
    return Page(
        items=[FeedRunPublic.model_validate(r) for r in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.post("/{feed_id:int}/run", operation_id="run_feed", status_code=202, responses=_NO_FEED)
async def run_feed(feed_id: EntityId, runtime: RuntimeDep) -> FeedPublic:
    """Make the feed due now: the scheduler (in `serve` or a `forager worker`) runs it next."""
    feed = await admin.schedule_now(runtime.db, feed_id)
    return FeedPublic.model_validate(feed)
