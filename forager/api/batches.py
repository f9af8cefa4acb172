"""Batches (issue 35): the tasks submitted under one ``batch_name``, listed with their
progress, paused, resumed, cancelled or restarted with one call each."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from forager.api.auth import ApiKeyDep
from forager.api.batch_schemas import BatchMovedPublic, BatchPublic, BatchRestart
from forager.api.deps import PagingDep, RuntimeDep
from forager.api.pages import Page
from forager.queue import door

router = APIRouter(prefix="/api/batches", tags=["batches"])

BatchName = Annotated[str, Path(min_length=1, max_length=255, description="The tasks' batch_name.")]
_NO_BATCH: dict[int | str, dict[str, Any]] = {404: {"description": "No task has this batch name."}}


@router.get("", operation_id="list_batches")
async def list_batches(runtime: RuntimeDep, paging: PagingDep) -> Page[BatchPublic]:
    """Batches, the newest first, each with its progress."""
    rows, total = await door.list_batches(runtime.db, limit=paging.limit, offset=paging.offset)
    items = [BatchPublic.of(b) for b in rows]
    return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)


@router.get("/{name}", operation_id="get_batch", responses=_NO_BATCH)
async def get_batch(name: BatchName, runtime: RuntimeDep) -> BatchPublic:
    """A batch's progress: tasks by status, products, failures by error type, pages per minute,
    start and estimated end."""
    return BatchPublic.of(await door.show_batch(runtime.db, name))


async def _move(
    runtime: RuntimeDep, name: str, action: door.BatchAction, by: str
) -> BatchMovedPublic:
    done = await door.move_batch(runtime.db, name, action, by=by)
    if done.moved and done.to == "pending":
        runtime.wake()
    batch = BatchPublic.of(await door.show_batch(runtime.db, name))
    return BatchMovedPublic(action=done.action, moved=done.moved, to=done.to, batch=batch)


@router.post("/{name}/pause", operation_id="pause_batch", responses=_NO_BATCH)
async def pause_batch(name: BatchName, runtime: RuntimeDep, key: ApiKeyDep) -> BatchMovedPublic:
    """Hold every waiting or running task of the batch (and its finished recurring ones); a
    worker busy with one drops it at its next step."""
    return await _move(runtime, name, "pause", key.name)


@router.post("/{name}/resume", operation_id="resume_batch", responses=_NO_BATCH)
async def resume_batch(name: BatchName, runtime: RuntimeDep, key: ApiKeyDep) -> BatchMovedPublic:
    """Give the batch's paused tasks back to the queue (a recurring one at its next crawl)."""
    return await _move(runtime, name, "resume", key.name)


@router.post("/{name}/cancel", operation_id="cancel_batch", responses=_NO_BATCH)
async def cancel_batch(name: BatchName, runtime: RuntimeDep, key: ApiKeyDep) -> BatchMovedPublic:
    """Cancel every task of the batch not yet finished (and its recurring ones' next crawls);
    a worker busy with one drops it at its next step. Finished tasks keep their status."""
    return await _move(runtime, name, "cancel", key.name)


@router.post("/{name}/restart", operation_id="restart_batch", responses=_NO_BATCH)
async def restart_batch(
    name: BatchName, runtime: RuntimeDep, key: ApiKeyDep, body: BatchRestart | None = None
) -> BatchMovedPublic:
    """Crawl the batch's failed tasks again (``only``: failed), or every finished one (all)."""
    only = (body or BatchRestart()).only
    action: door.BatchAction = "restart_all" if only == "all" else "restart_failed"
    return await _move(runtime, name, action, key.name)
