"""Crawl tasks: submit one or many URLs, list and inspect them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from sqlalchemy import select

from forager.alerts import completion
from forager.api.auth import ApiKeyDep
from forager.api.deps import EntityId, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.event_schemas import EventPublic
from forager.api.pages import Page, paged
from forager.api.task_filters import TASK_ORDERS, TaskFiltersDep, TaskSortDep
from forager.api.task_schemas import (
    AttemptPublic,
    BatchSubmitted,
    BatchURL,
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
    TaskRecrawl,
    TaskRestart,
    TaskRestartParsing,
    TaskStats,
    TaskSubmitted,
)
from forager.api.wire import Timestamp
from forager.db.models import CrawlAttempt, CrawlTask, Event
from forager.db.queries import get_or_not_found, page, page_and_total
from forager.db.types import utcnow
from forager.domains import profile
from forager.errors import InvalidRequest, InvalidURL
from forager.products import tags
from forager.queue import counts, door
from forager.queue.door import SubmitOutcome, SubmitSpec, submit_urls
from forager.queue.lifecycle import TaskStatus

router = APIRouter(prefix="/api/tasks", tags=["tasks"])


@router.post(
    "",
    operation_id="submit_task",
    status_code=201,
    responses={200: {"description": "The URL was known: the existing task."}},
)
async def submit_task(
    body: TaskCreate, runtime: RuntimeDep, response: Response, key: ApiKeyDep
) -> TaskSubmitted:
    """Submit one URL; a URL that normalizes to a known one returns the existing task (200)."""
    spec = body.spec(body.url, key.name)
    if body.webhook_url is not None:
        await completion.check_url(body.webhook_url, runtime.settings.private_targets)
    if body.request is not None:
        given = body.request.model_dump(exclude_unset=True)
        spec = replace(spec, fetch_request=profile.seal_request(given, runtime.box))
    [outcome] = await submit_urls(runtime.db, runtime.settings, [spec])
    if outcome.result == "invalid" or outcome.task_id is None:
        raise InvalidURL(outcome.error or "invalid URL")
    await tags.tag_submitted(runtime.db, [spec], [outcome])
    sent = [body.model_fields_set]
    [(_, hint)] = await _answer_duplicates(runtime, body.restart, [spec], [outcome], sent, key.name)
    if body.webhook_url is not None:
        await completion.register(
            runtime.db,
            runtime.box,
            url=body.webhook_url,
            secret=body.webhook_secret,
            task_ids=[outcome.task_id],
        )
    runtime.wake()
    async with runtime.db.reader() as session:
        task = await session.get(CrawlTask, outcome.task_id)
    if outcome.result == "duplicate":
        response.status_code = 200
    return TaskSubmitted(result=outcome.result, task=TaskPublic.model_validate(task), hint=hint)


@router.post("/batch", operation_id="submit_tasks")
async def submit_tasks(
    body: TaskBatchCreate, runtime: RuntimeDep, key: ApiKeyDep
) -> BatchSubmitted:
    """Submit many URLs at once, each with the batch's options or its own (priority, schedule,
    tags, request); each gets its own result (created, duplicate or invalid, with the reason)."""
    if body.webhook_url is not None:
        if body.batch_name is None:
            raise InvalidRequest(
                "webhook_url: a batch's webhook needs batch_name", field="webhook_url"
            )
        await completion.check_url(body.webhook_url, runtime.settings.private_targets)
        await completion.register(
            runtime.db,
            runtime.box,
            url=body.webhook_url,
            secret=body.webhook_secret,
            batch_name=body.batch_name,
        )
    refused: dict[int, SubmitResult] = {}
    specs: list[SubmitSpec] = []
    sent: list[set[str]] = []
    for index, entry in enumerate(body.urls):
        try:
            specs.append(_url_spec(runtime, body, entry, key.name))
        except InvalidRequest as exc:  # this URL's request: invalid, the others go on
            reason = f"urls.{index}.{exc.field}: {exc.message}"
            refused[index] = SubmitResult(input_url=entry.url, result="invalid", error=reason)
            continue
        sent.append(body.model_fields_set | set(entry.overrides()))
    outcomes = await submit_urls(runtime.db, runtime.settings, specs)
    await tags.tag_submitted(runtime.db, specs, outcomes)
    answers = await _answer_duplicates(runtime, body.restart, specs, outcomes, sent, key.name)
    runtime.wake()
    submitted = iter(
        SubmitResult.model_validate(o).model_copy(update={"status": status, "hint": hint})
        for o, (status, hint) in zip(outcomes, answers, strict=True)
    )
    results = [refused.get(i) or next(submitted) for i in range(len(body.urls))]
    count = {kind: sum(r.result == kind for r in results) for kind in ("created", "duplicate")}
    return BatchSubmitted(
        created=count["created"],
        duplicate=count["duplicate"],
        invalid=len(results) - count["created"] - count["duplicate"],
        results=results,
    )


def _url_spec(runtime: RuntimeDep, body: TaskBatchCreate, entry: BatchURL, by: str) -> SubmitSpec:
    """The submit request of one URL of a batch: the batch's options, then the URL's own."""
    spec = replace(body.spec(entry.url, by), **entry.overrides())
    if entry.tags:
        spec = replace(spec, tags=tuple(dict.fromkeys((*spec.tags, *entry.tags))))
    if entry.request is not None:
        given = entry.request.model_dump(exclude_unset=True)
        spec = replace(spec, fetch_request=profile.seal_request(given, runtime.box))
    return spec


# Options a duplicate's answer compares with the known task, when the submission set them.
_COMPARED = ("priority", "is_recurring", "crawl_frequency_seconds", "parser_name", "batch_name")


async def _answer_duplicates(
    runtime: RuntimeDep,
    restart: bool,
    specs: list[SubmitSpec],
    outcomes: list[SubmitOutcome],
    given: list[set[str]],
    by: str,
) -> list[tuple[str | None, str | None]]:
    """(status, hint) of each outcome. A duplicate says what its submission (the options
    ``given`` for it) did not change on the known task and how to crawl it again; with
    ``restart`` a finished one is restarted."""
    known = {o.task_id for o in outcomes if o.result == "duplicate" and o.task_id is not None}
    if not known:
        return [(o.status, None) for o in outcomes]
    async with runtime.db.reader() as session:
        rows = await session.scalars(select(CrawlTask).where(CrawlTask.id.in_(known)))
        tasks = {t.id: t for t in rows}
    answers: list[tuple[str | None, str | None]] = []
    for spec, outcome, sent in zip(specs, outcomes, given, strict=True):
        task = tasks.get(outcome.task_id or 0) if outcome.result == "duplicate" else None
        if task is None:
            answers.append((outcome.status, None))
            continue
        finished = task.status in door.RESTARTABLE
        if restart and finished:
            again = await door.restart(
                runtime.db, task.id, priority=spec.priority, scheduled_at=spec.scheduled_at, by=by
            )
            answers.append((again.status, f"restarted: the task was {task.status}; crawled again"))
            continue
        differs = [
            f"{name} {getattr(spec, name)!r} (the task has {getattr(task, name)!r})"
            for name in _COMPARED
            if name in sent and getattr(spec, name) != getattr(task, name)
        ]
        hint = f"the task exists with status {task.status}"
        if differs:
            hint += "; not applied: " + ", ".join(differs)
        if finished:
            again_by = f"POST /api/tasks/{task.id}/restart"
            hint += f"; to crawl it again submit with restart: true or {again_by}"
        answers.append((task.status, hint))
    return answers


@router.get("", operation_id="list_tasks")
async def list_tasks(
    session: ReadSessionDep,
    paging: PagingDep,
    filters: TaskFiltersDep,
    sort: TaskSortDep = "-created",
) -> Page[TaskPublic]:
    """Tasks, newest first (or in the ``sort`` order), with the total count for pagination."""
    query = filters.apply(select(CrawlTask), session.get_bind().dialect.name)
    order = TASK_ORDERS[sort]
    if filters.url_contains:  # one trigram search for the page and its total
        rows, total = await page_and_total(
            session, query, *order, limit=paging.limit, offset=paging.offset
        )
    elif sort != "-created":
        paged_query = query.order_by(*order).limit(paging.limit).offset(paging.offset)
        rows = list(await session.scalars(paged_query))
        total = await filters.total(session, query)
    else:
        rows = await filters.newest_page(session, query, limit=paging.limit, offset=paging.offset)
        total = await filters.total(session, query)
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
        Timestamp | None,
        Query(
            description="Tasks created since (default: 24 h ago); taken from the start of its "
            "hour, which the response's since shows."
        ),
    ] = None,
) -> TaskStats:
    """Tasks by status with their average duration, from the counters."""
    hour = counts.hour_of(since or utcnow() - timedelta(days=1))
    return TaskStats(
        since=counts.hour_start(hour),
        statuses=[StatusStats.model_validate(w) for w in await counts.created_since(session, hour)],
    )


@router.post("/restart-failed", operation_id="restart_failed_tasks")
async def restart_failed_tasks(
    body: RestartFailed, runtime: RuntimeDep, key: ApiKeyDep
) -> RestartedTasks:
    """Restart failed tasks in bulk (optionally one domain's, failed after a time)."""
    ids = await door.restart_failed(
        runtime.db,
        domain_id=body.domain_id,
        failed_after=body.failed_after,
        limit=body.limit,
        by=key.name,
    )
    if ids:
        runtime.wake()
    return RestartedTasks(restarted=len(ids), task_ids=ids)


@router.post("/restart-parsing", operation_id="restart_parsing_tasks")
async def restart_parsing_tasks(
    body: RestartParsing, runtime: RuntimeDep, key: ApiKeyDep
) -> RestartedTasks:
    """Parse stored pages again in bulk (one domain's, those read by an older parser version)."""
    ids = await door.restart_parsing_bulk(
        runtime.db,
        runtime.pages,
        domain_id=body.domain_id,
        domain_name=body.domain,
        outdated=body.outdated,
        parser_version_below=body.parser_version_below,
        parse_failures=body.parse_failures,
        limit=body.limit,
        by=key.name,
    )
    if ids:
        runtime.wake()
    return RestartedTasks(restarted=len(ids), task_ids=ids)


# The detail shows this many of the newest attempts and events (oldest first among them);
# the paged lists below give the rest.
DETAIL_ROWS = 50
_NO_TASK: dict[int | str, dict[str, Any]] = {404: {"description": "No such task."}}


async def _task_or_404(session: ReadSessionDep, task_id: int) -> CrawlTask:
    return await get_or_not_found(session, CrawlTask, task_id, f"task {task_id} does not exist")


def _attempts_of(task_id: int) -> Any:
    return select(CrawlAttempt).where(CrawlAttempt.task_id == task_id)


def _events_of(task_id: int) -> Any:
    return select(Event).where(Event.entity_type == "task", Event.entity_id == str(task_id))


@router.get("/{task_id:int}", operation_id="get_task", responses=_NO_TASK)
async def get_task(task_id: EntityId, session: ReadSessionDep, key: ApiKeyDep) -> TaskDetail:
    """One task with its newest attempts and events (``…_total`` says how many there are;
    ``/attempts`` and ``/events`` page through all of them)."""
    task = await _task_or_404(session, task_id)
    attempts, attempts_total = await page(
        session, _attempts_of(task_id), CrawlAttempt.id.desc(), limit=DETAIL_ROWS, offset=0
    )
    events, events_total = await page(
        session, _events_of(task_id), Event.id.desc(), limit=DETAIL_ROWS, offset=0
    )
    return TaskDetail(
        **TaskPublic.model_validate(task).model_dump(),
        error_trace=task.error_trace if key.role == "admin" else None,
        attempts=[AttemptPublic.model_validate(a) for a in reversed(attempts)],
        attempts_total=attempts_total,
        events=[EventPublic.model_validate(e) for e in reversed(events)],
        events_total=events_total,
    )


@router.get("/{task_id:int}/attempts", operation_id="list_task_attempts", responses=_NO_TASK)
async def list_task_attempts(
    task_id: EntityId, session: ReadSessionDep, paging: PagingDep
) -> Page[AttemptPublic]:
    """Every attempt of a task, oldest first, a page at a time."""
    await _task_or_404(session, task_id)
    return await paged(session, _attempts_of(task_id), CrawlAttempt.id, paging, AttemptPublic)


@router.get("/{task_id:int}/events", operation_id="list_task_events", responses=_NO_TASK)
async def list_task_events(
    task_id: EntityId, session: ReadSessionDep, paging: PagingDep
) -> Page[EventPublic]:
    """A task's event timeline, oldest first, a page at a time."""
    await _task_or_404(session, task_id)
    return await paged(session, _events_of(task_id), Event.id, paging, EventPublic)


_REFUSALS: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such task."},
    409: {"description": "Not allowed from the task's current status (in the body)."},
}


def _moved(runtime: RuntimeDep, task: CrawlTask) -> TaskPublic:
    if task.status in (TaskStatus.PENDING, TaskStatus.DOWNLOADED):
        runtime.wake()
    return TaskPublic.model_validate(task)


@router.post("/{task_id:int}/pause", operation_id="pause_task", responses=_REFUSALS)
async def pause_task(task_id: EntityId, runtime: RuntimeDep, key: ApiKeyDep) -> TaskPublic:
    """Pause a waiting or running task; a worker busy with it drops it at its next step."""
    return _moved(runtime, await door.pause(runtime.db, task_id, by=key.name))


@router.post("/{task_id:int}/resume", operation_id="resume_task", responses=_REFUSALS)
async def resume_task(task_id: EntityId, runtime: RuntimeDep, key: ApiKeyDep) -> TaskPublic:
    """Put a paused task back in the queue."""
    return _moved(runtime, await door.resume(runtime.db, task_id, by=key.name))


@router.post("/{task_id:int}/cancel", operation_id="cancel_task", responses=_REFUSALS)
async def cancel_task(task_id: EntityId, runtime: RuntimeDep, key: ApiKeyDep) -> TaskPublic:
    """Cancel a task for good (it can be restarted later)."""
    return _moved(runtime, await door.cancel(runtime.db, task_id, by=key.name))


@router.post("/{task_id:int}/restart", operation_id="restart_task", responses=_REFUSALS)
async def restart_task(
    task_id: EntityId, runtime: RuntimeDep, key: ApiKeyDep, body: TaskRestart | None = None
) -> TaskPublic:
    """Crawl a failed, completed or cancelled task again from the start."""
    options = body or TaskRestart()
    task = await door.restart(
        runtime.db,
        task_id,
        reset_retry_count=options.reset_retry_count,
        priority=options.priority,
        scheduled_at=options.scheduled_at,
        by=key.name,
    )
    return _moved(runtime, task)


@router.post(
    "/{task_id:int}/restart-parsing",
    operation_id="restart_task_parsing",
    responses=_REFUSALS,
)
async def restart_task_parsing(
    task_id: EntityId,
    runtime: RuntimeDep,
    key: ApiKeyDep,
    body: TaskRestartParsing | None = None,
) -> TaskPublic:
    """Parse the stored page again without fetching (only when the page is stored)."""
    options = body or TaskRestartParsing()
    pages = runtime.pages
    task = await door.restart_parsing(
        runtime.db, pages, task_id, reset_retry_count=options.reset_retry_count, by=key.name
    )
    return _moved(runtime, task)


@router.patch("/{task_id:int}/priority", operation_id="set_task_priority", responses=_REFUSALS)
async def set_task_priority(
    task_id: EntityId, body: TaskPriority, runtime: RuntimeDep, key: ApiKeyDep
) -> TaskPublic:
    """Change a task's priority; pending tasks are claimed in the new order at once."""
    task = await door.set_priority(runtime.db, task_id, body.priority, by=key.name)
    return _moved(runtime, task)


@router.patch("/{task_id:int}/recrawl", operation_id="set_task_recrawl", responses=_REFUSALS)
async def set_task_recrawl(
    task_id: EntityId, body: TaskRecrawl, runtime: RuntimeDep, key: ApiKeyDep
) -> TaskPublic:
    """Change whether and how often a task is crawled again, adaptive or not (fields left out
    keep their value; a bound sent as null goes back to its default)."""
    sent = body.model_fields_set
    change = door.RecrawlChange(
        is_recurring=body.is_recurring,
        crawl_frequency_seconds=body.crawl_frequency_seconds,
        adaptive_recrawl=body.adaptive_recrawl,
        min_crawl_frequency_seconds=body.min_crawl_frequency_seconds,
        max_crawl_frequency_seconds=body.max_crawl_frequency_seconds,
        reset=frozenset(
            name
            for name in ("min_crawl_frequency_seconds", "max_crawl_frequency_seconds")
            if name in sent and getattr(body, name) is None
        ),
    )
    return _moved(runtime, await door.set_recrawl(runtime.db, task_id, change, by=key.name))
