"""Operator actions on tasks: pause, resume, cancel, restart, restart parsing, re-prioritize.

Each is one compare-and-set from the statuses DESIGN.md's lifecycle allows; from any other
status it changes nothing and raises ``LifecycleConflict`` naming the current status. A worker
busy with a task that is paused or cancelled loses its lease here and drops the task at its
next phase boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db import audit
from forager.db.engine import Database
from forager.db.models import CrawlTask
from forager.db.queries import get_or_not_found
from forager.db.types import utcnow
from forager.errors import LifecycleConflict
from forager.queue.announce import new_work
from forager.queue.lifecycle import LEASED, TaskStatus
from forager.queue.moves import transition
from forager.queue.submit import recrawl_columns
from forager.store.pages import PageStore

S = TaskStatus
_NOT_LEASED = {"lease_owner": None, "lease_expires_at": None}


@dataclass(frozen=True, slots=True)
class Action:
    """An operator action: the statuses it applies to and the status it leads to."""

    name: str
    event: str
    from_: tuple[TaskStatus, ...]
    to: TaskStatus


PAUSE = Action(
    "pause",
    "paused",
    (S.PENDING, S.QUEUED, S.CRAWLING, S.DOWNLOADED, S.QUEUED_PARSE, S.PARSING),
    S.PAUSED,
)
RESUME = Action("resume", "resumed", (S.PAUSED,), S.PENDING)
CANCEL = Action(
    "cancel", "cancelled", tuple(s for s in TaskStatus if s != S.CANCELLED), S.CANCELLED
)
RESTART = Action("restart", "restarted", (S.FAILED, S.COMPLETED, S.CANCELLED), S.PENDING)
RESTART_PARSING = Action(
    "restart parsing", "restart_parsing", (S.FAILED, S.COMPLETED, S.CANCELLED), S.DOWNLOADED
)

# Actions after which the task is claimable (a worker's claim or parse claim): announced.
_CLAIMABLE_AGAIN = (RESUME, RESTART, RESTART_PARSING)


async def _current(session: AsyncSession, task_id: int) -> CrawlTask:
    missing = f"task {task_id} does not exist"
    return await get_or_not_found(session, CrawlTask, task_id, missing, populate_existing=True)


def _refuse(action: Action, task: CrawlTask) -> LifecycleConflict:
    allowed = ", ".join(action.from_)
    return LifecycleConflict(
        f"cannot {action.name} task {task.id} while it is {task.status} (allowed from: {allowed})",
        current_status=task.status,
    )


async def _apply(db: Database, task_id: int, action: Action, by: str, **values: Any) -> CrawlTask:
    async with db.session() as session:
        moved = await transition(
            session,
            task_id,
            from_=action.from_,
            to=action.to,
            event=action.event,
            details={"by": by},
            **values,
        )
        task = await _current(session, task_id)
        if not moved:
            raise _refuse(action, task)
        if action in _CLAIMABLE_AGAIN:
            await new_work(session)
        return task


async def pause(db: Database, task_id: int, by: str = "api") -> CrawlTask:
    return await _apply(db, task_id, PAUSE, by, **_NOT_LEASED)


async def resume(db: Database, task_id: int, by: str = "api") -> CrawlTask:
    return await _apply(db, task_id, RESUME, by, scheduled_at=utcnow(), started_at=None)


async def cancel(db: Database, task_id: int, by: str = "api") -> CrawlTask:
    return await _apply(db, task_id, CANCEL, by, **_NOT_LEASED)


async def restart(
    db: Database,
    task_id: int,
    *,
    reset_retry_count: bool = True,
    priority: int | None = None,
    scheduled_at: datetime | None = None,
    by: str = "api",
) -> CrawlTask:
    """Back to ``pending`` (seed 004's restart), optionally re-prioritized and re-scheduled."""
    values: dict[str, Any] = {
        "scheduled_at": scheduled_at or utcnow(),
        "error_type": None,
        "error_message": None,
        "error_trace": None,
        "started_at": None,
        "completed_at": None,
        "next_crawl_at": None,
        **_NOT_LEASED,
    }
    if reset_retry_count:
        values["retry_count"] = 0
    if priority is not None:
        values["priority"] = priority
    return await _apply(db, task_id, RESTART, by, **values)


async def restart_parsing(
    db: Database, pages: PageStore, task_id: int, *, reset_retry_count: bool = True, by: str = "api"
) -> CrawlTask:
    """Back to ``downloaded`` so a worker parses the stored page again, without fetching."""
    async with db.reader() as session:
        task = await _current(session, task_id)
    if task.status not in RESTART_PARSING.from_:
        raise _refuse(RESTART_PARSING, task)
    if task.html_path is None or not await pages.exists(task.html_path):
        raise LifecycleConflict(
            f"cannot restart parsing of task {task_id}: it has no stored page to parse",
            current_status=task.status,
        )
    values: dict[str, Any] = {
        "error_type": None,
        "error_message": None,
        "error_trace": None,
        "completed_at": None,
    }
    if reset_retry_count:
        values["retry_count"] = 0
    return await _apply(db, task_id, RESTART_PARSING, by, **values)


async def _in_place(
    session: AsyncSession,
    task: CrawlTask,
    event: str,
    what: str,
    details: dict[str, Any],
    **values: Any,
) -> CrawlTask:
    """Change ``values`` of ``task`` in whatever status it is (compare-and-set on it)."""
    moved = await transition(
        session,
        task.id,
        from_=[task.status],
        to=task.status,
        event=event,
        details=details,
        **values,
    )
    task = await _current(session, task.id)
    if not moved:  # its status changed between the two statements: report it
        raise LifecycleConflict(
            f"task {task.id} changed while its {what} was being set; try again",
            current_status=task.status,
        )
    return task


async def set_priority(db: Database, task_id: int, priority: int, by: str = "api") -> CrawlTask:
    """Change the priority; a pending task is claimed in its new order at once."""
    async with db.session() as session:
        task = await _current(session, task_id)
        details = {"by": by, "from": task.priority, "priority": priority}
        return await _in_place(
            session, task, "priority_changed", "priority", details, priority=priority
        )


@dataclass(frozen=True, slots=True)
class RecrawlChange:
    """A change of a task's recrawl settings; ``None`` keeps the task's value (a bound named in
    ``reset`` goes back to its default)."""

    is_recurring: bool | None = None
    crawl_frequency_seconds: int | None = None
    adaptive_recrawl: bool | None = None
    min_crawl_frequency_seconds: int | None = None
    max_crawl_frequency_seconds: int | None = None
    reset: frozenset[str] = frozenset()


async def set_recrawl(
    db: Database, task_id: int, change: RecrawlChange, by: str = "api"
) -> CrawlTask:
    """Change whether and how often a task is crawled again; the adaptive frequency starts over
    from ``crawl_frequency_seconds``, and a finished recurring task's next crawl follows it."""
    async with db.session() as session:
        task = await _current(session, task_id)
        recurring = task.is_recurring if change.is_recurring is None else change.is_recurring
        adaptive = (
            task.adaptive_recrawl and recurring  # no longer recurring: no longer adaptive
            if change.adaptive_recrawl is None
            else change.adaptive_recrawl
        )
        base = change.crawl_frequency_seconds or task.crawl_frequency_seconds
        low, high = (
            getattr(change, name)
            or (getattr(task, name) if task.adaptive_recrawl and name not in change.reset else None)
            for name in ("min_crawl_frequency_seconds", "max_crawl_frequency_seconds")
        )
        values = recrawl_columns(recurring, adaptive, base, low, high)
        recurring = values["is_recurring"]
        values["crawl_frequency_seconds"] = base
        if values["crawl_frequency_reason"] is not None:
            values["crawl_frequency_reason"] = f"set by {by}: {values['crawl_frequency_reason']}"
        if task.status in (S.COMPLETED, S.FAILED):
            every = values["current_crawl_frequency_seconds"] or base
            since = task.completed_at or utcnow()
            values["next_crawl_at"] = since + timedelta(seconds=int(every)) if recurring else None
        details = {
            "by": by,
            "is_recurring": recurring,
            "crawl_frequency_seconds": base,
            "adaptive_recrawl": adaptive,
        }
        return await _in_place(
            session, task, "recrawl_changed", "recrawl settings", details, **values
        )


async def restart_failed(
    db: Database,
    *,
    domain_id: int | None = None,
    failed_after: datetime | None = None,
    limit: int = 1000,
    by: str = "api",
) -> list[int]:
    """Restart up to ``limit`` failed tasks (oldest failure first); returns their ids."""
    now = utcnow()
    async with db.session() as session:
        pick = (
            select(CrawlTask.id)
            .where(CrawlTask.status == S.FAILED)
            .order_by(CrawlTask.completed_at, CrawlTask.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        if domain_id is not None:
            pick = pick.where(CrawlTask.domain_id == domain_id)
        if failed_after is not None:
            pick = pick.where(CrawlTask.completed_at >= failed_after)
        ids = list((await session.execute(pick)).scalars())
        if not ids:
            return []
        result = await session.execute(
            update(CrawlTask)
            .where(CrawlTask.id.in_(ids), CrawlTask.status == S.FAILED)
            .values(
                status=S.PENDING,
                scheduled_at=now,
                retry_count=0,
                error_type=None,
                error_message=None,
                error_trace=None,
                started_at=None,
                completed_at=None,
                next_crawl_at=None,
                updated_at=now,
            )
            .returning(CrawlTask.id)
            .execution_options(synchronize_session=False)
        )
        restarted = sorted(result.scalars())
        audit.record(
            session, "task", restarted, "restarted", {"to": S.PENDING, "by": by, "bulk": True}
        )
        await new_work(session)
        return restarted


def _version_key(version: str) -> tuple[int, ...] | tuple[str]:
    """Parser versions compare numerically part by part ("2.10" > "2.9"), else as text."""
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else (version,)


def _older(version: str, than: str) -> bool:
    mine, other = _version_key(version), _version_key(than)
    if type(mine[0]) is not type(other[0]):
        return version != than
    return mine < other  # type: ignore[operator]


async def restart_parsing_bulk(
    db: Database,
    pages: PageStore,
    *,
    domain_id: int | None = None,
    domain_name: str | None = None,
    outdated: bool = False,
    parser_version_below: str | None = None,
    parse_failures: bool = False,
    limit: int = 1000,
    by: str = "api",
) -> list[int]:
    """Reparse stored pages in bulk (after a parser version bump); returns the task ids.

    Picks finished tasks (completed / failed / cancelled) with a stored page, optionally of one
    domain, whose product (or, on a page without one, whose items) was read by an older parser:
    ``outdated`` means a version other than the task's parser's current one,
    ``parser_version_below`` a version older than that.
    ``parse_failures`` adds the tasks whose parse failed (``error_type`` parse: no product);
    given alone, it picks only those.
    """
    from forager.db.models import Domain, Item, Product
    from forager.parse.registry import get_parser, parser_names
    from forager.parse.selectors import SELECTOR

    current = {name: get_parser(name).version for name in parser_names()}

    def item_read_by(column: Any) -> Any:  # the parser of the page's items (the first one's)
        first = select(column).where(Item.crawl_task_id == CrawlTask.id).order_by(Item.id)
        return first.limit(1).scalar_subquery()

    async with db.reader() as session:
        pick = (
            select(
                CrawlTask.id,
                func.coalesce(CrawlTask.parser_name, Domain.parser_name),
                CrawlTask.html_path,
                func.coalesce(Product.parser_name, item_read_by(Item.parser_name)),
                func.coalesce(Product.parser_version, item_read_by(Item.parser_version)),
                CrawlTask.status,
                CrawlTask.error_type,
                Domain.selector_version,
            )
            .join(Domain, Domain.id == CrawlTask.domain_id)
            .outerjoin(Product, Product.url_hash == CrawlTask.url_hash)
            .where(CrawlTask.status.in_(RESTART_PARSING.from_), CrawlTask.html_path.is_not(None))
            .order_by(CrawlTask.id)
        )
        if domain_id is not None:
            pick = pick.where(CrawlTask.domain_id == domain_id)
        if domain_name is not None:
            pick = pick.where(Domain.domain_name == domain_name.strip().lower())
        rows = list(await session.execute(pick))
    chosen: list[int] = []
    only_failures = parse_failures and not outdated and parser_version_below is None
    for row in rows:
        task_id, task_parser, html_path, product_parser, product_version, status, error = row[:7]
        # A selector map's version is the domain's (docs/PARSERS.md), not the registry's.
        now_version = str(row[7]) if task_parser == SELECTOR else current.get(task_parser)
        if product_version is None:
            wanted = parse_failures and status == S.FAILED and error == "parse"
        else:
            wanted = not only_failures
            if outdated:
                wanted &= (product_parser, product_version) != (task_parser, now_version)
            if parser_version_below is not None:
                wanted &= _older(product_version, parser_version_below)
        if not wanted:
            continue
        if html_path is not None and await pages.exists(html_path):
            chosen.append(task_id)
            if len(chosen) == limit:
                break
    if not chosen:
        return []
    async with db.session() as session:
        result = await session.execute(
            update(CrawlTask)
            .where(CrawlTask.id.in_(chosen), CrawlTask.status.in_(RESTART_PARSING.from_))
            .values(
                status=S.DOWNLOADED,
                retry_count=0,
                error_type=None,
                error_message=None,
                error_trace=None,
                completed_at=None,
                updated_at=utcnow(),
                **_NOT_LEASED,
            )
            .returning(CrawlTask.id)
            .execution_options(synchronize_session=False)
        )
        restarted = sorted(result.scalars())
        audit.record(
            session,
            "task",
            restarted,
            RESTART_PARSING.event,
            {"to": S.DOWNLOADED, "by": by, "bulk": True},
        )
        if restarted:
            await new_work(session)
        return restarted


async def delete_domain_tasks(session: AsyncSession, domain_id: int) -> int:
    """Delete a domain's tasks that no worker holds, in the caller's transaction (the domain
    is being deleted); returns how many are left: leased meanwhile, they refuse the delete."""
    await session.execute(
        delete(CrawlTask).where(CrawlTask.domain_id == domain_id, CrawlTask.status.not_in(LEASED))
    )
    left = select(func.count()).select_from(CrawlTask).where(CrawlTask.domain_id == domain_id)
    return await session.scalar(left) or 0
