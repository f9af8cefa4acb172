"""Crawl tasks: submit one or many URLs, list and inspect them."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from pydantic import AwareDatetime
from sqlalchemy import Select, func, select

from forager.api.deps import EntityId, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.schemas import (
    AttemptPublic,
    BatchSubmitted,
    EventPublic,
    Page,
    RestartedTasks,
    RestartFailed,
    RestartParsing,
    StatusStats,
    SubmitResult,
    TaskBatchCreate,
    TaskCreate,
    TaskDetail,
    TaskPriority,
    TaskPublic,
    TaskRestart,
    TaskRestartParsing,
    TaskStats,
    TaskSubmitted,
)
from forager.db.dialect import seconds_between
from forager.db.models import CrawlAttempt, CrawlTask, Domain, Event
from forager.db.queries import page
from forager.db.types import utcnow
from forager.errors import InvalidRequest, InvalidURL, NotFound
from forager.queue import admin
from forager.queue.lifecycle import TaskStatus
from forager.queue.submit import SubmitSpec, submit_urls

router = APIRouter(prefix="/api/tasks", tags=["tasks"])


def _spec(url: str, body: TaskCreate | TaskBatchCreate) -> SubmitSpec:
    return SubmitSpec(
        url=url,
        priority=body.priority,
        is_recurring=body.is_recurring,
        crawl_frequency_seconds=body.crawl_frequency_seconds,
        max_retries=body.max_retries,
        scheduled_at=body.scheduled_at,
        parser_name=body.parser_name,
        batch_name=body.batch_name,
        created_by="api",
    )


@router.post(
    "",
    operation_id="submit_task",
    status_code=201,
    responses={200: {"description": "The URL was known: the existing task."}},
)
async def submit_task(body: TaskCreate, runtime: RuntimeDep, response: Response) -> TaskSubmitted:
    """Submit one URL; a URL that normalizes to a known one returns the existing task (200)."""
    [outcome] = await submit_urls(runtime.db, runtime.settings, [_spec(body.url, body)])
    if outcome.result == "invalid" or outcome.task_id is None:
        raise InvalidURL(outcome.error or "invalid URL")
    runtime.wake()
    async with runtime.db.reader() as session:
        task = await session.get(CrawlTask, outcome.task_id)
    if outcome.result == "duplicate":
        response.status_code = 200
    return TaskSubmitted(result=outcome.result, task=TaskPublic.model_validate(task))


@router.post("/batch", operation_id="submit_tasks")
async def submit_tasks(body: TaskBatchCreate, runtime: RuntimeDep) -> BatchSubmitted:
    """Submit many URLs at once; each gets its own result (created, duplicate or invalid)."""
    outcomes = await submit_urls(
        runtime.db, runtime.settings, [_spec(url, body) for url in body.urls]
    )
    runtime.wake()
    results = [
        SubmitResult(
            input_url=o.input_url,
            result=o.result,
            task_id=o.task_id,
            url=o.url,
            status=o.status,
            error=o.error,
        )
        for o in outcomes
    ]
    count = {kind: sum(r.result == kind for r in results) for kind in ("created", "duplicate")}
    return BatchSubmitted(
        created=count["created"],
        duplicate=count["duplicate"],
        invalid=len(results) - count["created"] - count["duplicate"],
        results=results,
    )


@dataclass(frozen=True)
class TaskFilters:
    """The task list's filters, shared by every view of the task table."""

    status: TaskStatus | None = None
    domain: str | None = None
    batch_name: str | None = None
    created_by: str | None = None
    min_priority: int | None = None
    max_priority: int | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    completed_after: datetime | None = None
    completed_before: datetime | None = None
    url_contains: str | None = None

    def apply(self, query: Select[Any]) -> Select[Any]:
        t = CrawlTask
        if self.status is not None:
            query = query.where(t.status == self.status.value)
        if self.domain is not None:
            query = query.join(Domain, Domain.id == t.domain_id).where(
                Domain.domain_name == self.domain.lower()
            )
        if self.url_contains:
            query = query.where(t.url.contains(self.url_contains, autoescape=True))
        for column, value, compare in (
            (t.batch_name, self.batch_name, operator.eq),
            (t.created_by, self.created_by, operator.eq),
            (t.priority, self.min_priority, operator.ge),
            (t.priority, self.max_priority, operator.le),
            (t.created_at, self.created_after, operator.ge),
            (t.created_at, self.created_before, operator.lt),
            (t.completed_at, self.completed_after, operator.ge),
            (t.completed_at, self.completed_before, operator.lt),
        ):
            if value is not None:
                query = query.where(compare(column, value))
        return query


def task_filters(
    status: Annotated[TaskStatus | None, Query(description="Only tasks in this status.")] = None,
    domain: Annotated[str | None, Query(max_length=255, description="Domain name.")] = None,
    batch_name: Annotated[str | None, Query(max_length=255)] = None,
    created_by: Annotated[str | None, Query(max_length=100)] = None,
    min_priority: Annotated[int | None, Query(ge=1, le=10)] = None,
    max_priority: Annotated[int | None, Query(ge=1, le=10)] = None,
    created_after: Annotated[AwareDatetime | None, Query()] = None,
    created_before: Annotated[AwareDatetime | None, Query()] = None,
    completed_after: Annotated[AwareDatetime | None, Query()] = None,
    completed_before: Annotated[AwareDatetime | None, Query()] = None,
    url_contains: Annotated[
        str | None, Query(max_length=2048, description="Text the URL contains.")
    ] = None,
) -> TaskFilters:
    if min_priority is not None and max_priority is not None and min_priority > max_priority:
        raise InvalidRequest("min_priority must not exceed max_priority", field="min_priority")
    return TaskFilters(
        status,
        domain,
        batch_name,
        created_by,
        min_priority,
        max_priority,
        created_after,
        created_before,
        completed_after,
        completed_before,
        url_contains,
    )


TaskFiltersDep = Annotated[TaskFilters, Depends(task_filters)]


@router.get("", operation_id="list_tasks")
async def list_tasks(
    session: ReadSessionDep, paging: PagingDep, filters: TaskFiltersDep
) -> Page[TaskPublic]:
    """Tasks, newest first, with the total count for pagination."""
    rows, total = await page(
        session,
        filters.apply(select(CrawlTask)),
        CrawlTask.id.desc(),
        limit=paging.limit,
        offset=paging.offset,
    )
    return Page(
        items=[TaskPublic.model_validate(t) for t in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.get("/stats", operation_id="task_stats")
async def task_stats(
    session: ReadSessionDep,
    since: Annotated[
        AwareDatetime | None, Query(description="Tasks created since (default: 24 h ago).")
    ] = None,
) -> TaskStats:
    """Tasks by status with their average duration (seed 004, query 6)."""
    since = since or utcnow() - timedelta(days=1)
    duration = seconds_between(session, CrawlTask.started_at, CrawlTask.completed_at)
    rows = await session.execute(
        select(CrawlTask.status, func.count(), func.avg(duration))
        .where(CrawlTask.created_at >= since)
        .group_by(CrawlTask.status)
        .order_by(CrawlTask.status)
    )
    return TaskStats(
        since=since,
        statuses=[
            StatusStats(
                status=status,
                count=count,
                avg_duration_seconds=None if avg is None else round(float(avg), 3),
            )
            for status, count, avg in rows
        ],
    )


@router.post("/restart-failed", operation_id="restart_failed_tasks")
async def restart_failed_tasks(body: RestartFailed, runtime: RuntimeDep) -> RestartedTasks:
    """Restart failed tasks in bulk (optionally one domain's, failed after a time)."""
    ids = await admin.restart_failed(
        runtime.db, domain_id=body.domain_id, failed_after=body.failed_after, limit=body.limit
    )
    if ids:
        runtime.wake()
    return RestartedTasks(restarted=len(ids), task_ids=ids)


@router.post("/restart-parsing", operation_id="restart_parsing_tasks")
async def restart_parsing_tasks(body: RestartParsing, runtime: RuntimeDep) -> RestartedTasks:
    """Parse stored pages again in bulk (one domain's, those read by an older parser version)."""
    ids = await admin.restart_parsing_bulk(
        runtime.db,
        runtime.pages,
        domain_id=body.domain_id,
        domain_name=body.domain,
        outdated=body.outdated,
        parser_version_below=body.parser_version_below,
        parse_failures=body.parse_failures,
        limit=body.limit,
    )
    if ids:
        runtime.wake()
    return RestartedTasks(restarted=len(ids), task_ids=ids)


@router.get(
    "/{task_id}", operation_id="get_task", responses={404: {"description": "No such task."}}
)
async def get_task(task_id: EntityId, session: ReadSessionDep) -> TaskDetail:
    """One task with every attempt and its event timeline."""
    task = await session.get(CrawlTask, task_id)
    if task is None:
        raise NotFound(f"task {task_id} does not exist")
    attempts = await session.scalars(
        select(CrawlAttempt).where(CrawlAttempt.task_id == task_id).order_by(CrawlAttempt.id)
    )
    events = await session.scalars(
        select(Event)
        .where(Event.entity_type == "task", Event.entity_id == str(task_id))
        .order_by(Event.id)
    )
    return TaskDetail(
        **TaskPublic.model_validate(task).model_dump(),
        attempts=[AttemptPublic.model_validate(a) for a in attempts],
        events=[EventPublic.model_validate(e) for e in events],
    )


_REFUSALS: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such task."},
    409: {"description": "Not allowed from the task's current status (in the body)."},
}


def _moved(runtime: RuntimeDep, task: CrawlTask) -> TaskPublic:
    if task.status in (TaskStatus.PENDING, TaskStatus.DOWNLOADED):
        runtime.wake()
    return TaskPublic.model_validate(task)


@router.post("/{task_id}/pause", operation_id="pause_task", responses=_REFUSALS)
async def pause_task(task_id: EntityId, runtime: RuntimeDep) -> TaskPublic:
    """Pause a waiting or running task; a worker busy with it drops it at its next step."""
    return _moved(runtime, await admin.pause(runtime.db, task_id))


@router.post("/{task_id}/resume", operation_id="resume_task", responses=_REFUSALS)
async def resume_task(task_id: EntityId, runtime: RuntimeDep) -> TaskPublic:
    """Put a paused task back in the queue."""
    return _moved(runtime, await admin.resume(runtime.db, task_id))


@router.post("/{task_id}/cancel", operation_id="cancel_task", responses=_REFUSALS)
async def cancel_task(task_id: EntityId, runtime: RuntimeDep) -> TaskPublic:
    """Cancel a task for good (it can be restarted later)."""
    return _moved(runtime, await admin.cancel(runtime.db, task_id))


@router.post("/{task_id}/restart", operation_id="restart_task", responses=_REFUSALS)
async def restart_task(
    task_id: EntityId, runtime: RuntimeDep, body: TaskRestart | None = None
) -> TaskPublic:
    """Crawl a failed, completed or cancelled task again from the start."""
    options = body or TaskRestart()
    task = await admin.restart(
        runtime.db,
        task_id,
        reset_retry_count=options.reset_retry_count,
        priority=options.priority,
        scheduled_at=options.scheduled_at,
    )
    return _moved(runtime, task)


@router.post(
    "/{task_id}/restart-parsing",
    operation_id="restart_task_parsing",
    responses=_REFUSALS,
)
async def restart_task_parsing(
    task_id: EntityId, runtime: RuntimeDep, body: TaskRestartParsing | None = None
) -> TaskPublic:
    """Parse the stored page again without fetching (only when the page is stored)."""
    options = body or TaskRestartParsing()
    pages = runtime.pages
    task = await admin.restart_parsing(
        runtime.db, pages, task_id, reset_retry_count=options.reset_retry_count
    )
    return _moved(runtime, task)


@router.patch("/{task_id}/priority", operation_id="set_task_priority", responses=_REFUSALS)
async def set_task_priority(
    task_id: EntityId, body: TaskPriority, runtime: RuntimeDep
) -> TaskPublic:
    """Change a task's priority; pending tasks are claimed in the new order at once."""
    return _moved(runtime, await admin.set_priority(runtime.db, task_id, body.priority))
