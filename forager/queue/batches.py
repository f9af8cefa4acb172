"""Batches (issue 35): the tasks submitted under one ``batch_name``, moved and read as a whole.

A move (pause, resume, cancel, restart) walks the batch's tasks in id order, ``CHUNK`` at a time,
one transaction per chunk: each chunk reads the ids of the tasks in the move's statuses (the
``(batch_name, status, id)`` index) and moves them with one compare-and-set on ``(id, status)``,
so a task a worker moved meanwhile is left as the worker left it. A worker holding a task that
is paused or cancelled loses its lease, as with the single-task moves (``queue/admin.py``): its
next compare-and-set finds nothing and its attempt is ``discarded``. Keyset order means a walk
ends however many tasks the workers move meanwhile, and no transaction locks more than a chunk.

A recurring task that has finished (``completed`` or ``failed`` with a next crawl due) is held
by a pause and cancelled by a cancel too: otherwise the scheduler would make it due again while
its batch is paused or after it was cancelled. A resume gives it back at its next crawl time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, case, func, or_, select, update

from forager.db import audit
from forager.db.engine import Database
from forager.db.models import CrawlTask, Product
from forager.db.types import utcnow
from forager.errors import NotFound
from forager.queue.admin import CANCEL, PAUSE, RESTART, RESUME
from forager.queue.announce import new_work
from forager.queue.lifecycle import TERMINAL, TaskStatus

S = TaskStatus
CHUNK = 1000
# A rate is the pages finished over the last ten minutes, never taken over less than 30 s (a
# burst is not a pace): as /api/progress computes it.
RATE_WINDOW = timedelta(minutes=10)
MIN_SPAN = timedelta(seconds=30)
_PAGES = (S.COMPLETED, S.FAILED)  # a page fetched (cancelled tasks are not pages)

BatchAction = Literal["pause", "resume", "cancel", "restart_failed", "restart_all"]


def _due_again() -> ColumnElement[bool]:
    """A finished recurring task whose next crawl the scheduler will make due."""
    return and_(
        CrawlTask.status.in_(_PAGES),
        CrawlTask.is_recurring.is_(True),
        CrawlTask.next_crawl_at.is_not(None),
    )


@dataclass(frozen=True, slots=True)
class _Move:
    event: str
    to: TaskStatus
    statuses: tuple[TaskStatus, ...]
    recurring_too: bool = False  # also finished recurring tasks with a next crawl due

    def applies(self) -> ColumnElement[bool]:
        mine = CrawlTask.status.in_(self.statuses)
        return or_(mine, _due_again()) if self.recurring_too else mine


_NOT_LEASED = {"lease_owner": None, "lease_expires_at": None}
_MOVES: dict[BatchAction, _Move] = {
    "pause": _Move(PAUSE.event, S.PAUSED, PAUSE.from_, recurring_too=True),
    "resume": _Move(RESUME.event, S.PENDING, RESUME.from_),
    # Finished tasks stay as they ended (a single task's cancel may take a completed one).
    "cancel": _Move(
        CANCEL.event,
        S.CANCELLED,
        tuple(s for s in CANCEL.from_ if s not in TERMINAL),
        recurring_too=True,
    ),
    "restart_failed": _Move(RESTART.event, S.PENDING, (S.FAILED,)),
    "restart_all": _Move(RESTART.event, S.PENDING, RESTART.from_),
}


def _values(action: BatchAction, now: datetime) -> dict[str, Any]:
    if action in ("pause", "cancel"):
        return dict(_NOT_LEASED)
    if action == "resume":
        # Back now; a recurring task held after it finished comes back at its next crawl.
        later = case((CrawlTask.next_crawl_at > now, CrawlTask.next_crawl_at), else_=now)
        return {"scheduled_at": later, "started_at": None, "next_crawl_at": None}
    return {  # a restart, as queue.admin.restart does it
        "scheduled_at": now,
        "retry_count": 0,
        "error_type": None,
        "error_message": None,
        "started_at": None,
        "completed_at": None,
        "next_crawl_at": None,
        **_NOT_LEASED,
    }


@dataclass(frozen=True, slots=True)
class BatchMoved:
    """What a batch move did: how many tasks moved, to which status."""

    batch_name: str
    action: BatchAction
    moved: int
    to: str


async def _exists(db: Database, name: str) -> None:
    async with db.reader() as session:
        found = await session.scalar(
            select(CrawlTask.id).where(CrawlTask.batch_name == name).limit(1)
        )
    if found is None:
        raise NotFound(f"batch {name!r} has no tasks")


async def move_batch(db: Database, name: str, action: BatchAction, by: str = "api") -> BatchMoved:
    """Pause, resume, cancel or restart (failed only or all) every task of batch ``name`` that
    the move applies to, a chunk per transaction; each moved task gets its event, the batch one
    event with the count."""
    await _exists(db, name)
    spec = _MOVES[action]
    last = 0
    moved = 0
    while True:
        async with db.session() as session:
            now = utcnow()
            pick = (
                select(CrawlTask.id)
                .where(CrawlTask.batch_name == name, spec.applies(), CrawlTask.id > last)
                .order_by(CrawlTask.id)
                .limit(CHUNK)
            )
            ids = list((await session.execute(pick)).scalars())
            if not ids:
                break
            last = ids[-1]
            result = await session.execute(
                update(CrawlTask)
                .where(CrawlTask.id.in_(ids), spec.applies())  # compare-and-set on the status
                .values(status=spec.to, updated_at=now, **_values(action, now))
                .returning(CrawlTask.id)
                .execution_options(synchronize_session=False)
            )
            done = sorted(result.scalars())
            details = {"to": spec.to, "by": by, "batch": name}
            audit.record(session, "task", done, spec.event, details)
            if done and spec.to == S.PENDING:
                await new_work(session)
            moved += len(done)
        if len(ids) < CHUNK:
            break
    async with db.session() as session:
        audit.record(session, "batch", [name], spec.event, {"by": by, "moved": moved})
    return BatchMoved(name, action, moved, spec.to)


# -- reading ---------------------------------------------------------------------------------


@dataclass(slots=True)
class BatchProgress:
    """A batch: its tasks by status, products, failures by error type, pace and estimated end."""

    name: str
    started_at: datetime  # its first task's submission
    last_activity_at: datetime
    by_status: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    products: int = 0
    finished_recently: int = 0
    pages_per_minute: float | None = None
    estimated_end: datetime | None = None

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    @property
    def done(self) -> int:
        return sum(self.by_status.get(s, 0) for s in TERMINAL)

    @property
    def paused(self) -> int:
        return self.by_status.get(S.PAUSED, 0)

    @property
    def remaining(self) -> int:
        return self.total - self.done - self.paused

    @property
    def state(self) -> str:
        """running (work waiting or in flight), paused (only paused work left) or finished."""
        if self.remaining:
            return "running"
        return "paused" if self.paused else "finished"


async def _progress(db: Database, names: list[str]) -> dict[str, BatchProgress]:
    """Every figure of the batches ``names``, a few grouped statements for all of them."""
    if not names:
        return {}
    now = utcnow()
    mine = CrawlTask.batch_name.in_(names)
    async with db.reader() as session:
        found = {
            str(name): BatchProgress(str(name), first, last)
            for name, first, last in await session.execute(
                select(
                    CrawlTask.batch_name,
                    func.min(CrawlTask.created_at),
                    func.max(CrawlTask.updated_at),
                )
                .where(mine)
                .group_by(CrawlTask.batch_name)
            )
        }
        for name, status, n in await session.execute(
            select(CrawlTask.batch_name, CrawlTask.status, func.count())
            .where(mine)
            .group_by(CrawlTask.batch_name, CrawlTask.status)
        ):
            found[str(name)].by_status[str(status)] = int(n)
        for name, error_type, n in await session.execute(
            select(CrawlTask.batch_name, CrawlTask.error_type, func.count())
            .where(mine, CrawlTask.status == S.FAILED)
            .group_by(CrawlTask.batch_name, CrawlTask.error_type)
        ):
            found[str(name)].failures[str(error_type or "unknown")] = int(n)
        for name, n in await session.execute(
            select(CrawlTask.batch_name, func.count(Product.id))
            .join(Product, Product.url_hash == CrawlTask.url_hash)
            .where(mine)
            .group_by(CrawlTask.batch_name)
        ):
            found[str(name)].products = int(n)
        for name, n, oldest in await session.execute(
            select(CrawlTask.batch_name, func.count(), func.min(CrawlTask.updated_at))
            .where(CrawlTask.updated_at >= now - RATE_WINDOW, CrawlTask.status.in_(_PAGES), mine)
            .group_by(CrawlTask.batch_name)
        ):
            batch = found[str(name)]
            span = max(now - oldest, MIN_SPAN)
            rate = int(n) / (span.total_seconds() / 60)
            batch.finished_recently = int(n)
            batch.pages_per_minute = round(rate, 2)
            if batch.remaining:
                batch.estimated_end = now + timedelta(minutes=batch.remaining / rate)
    return found


async def show_batch(db: Database, name: str) -> BatchProgress:
    """Batch ``name`` with its progress (``NotFound`` when no task carries the name)."""
    found = (await _progress(db, [name])).get(name)
    if found is None:
        raise NotFound(f"batch {name!r} has no tasks")
    return found


async def list_batches(db: Database, *, limit: int, offset: int) -> tuple[list[BatchProgress], int]:
    """Batches, the newest first (by their first task's submission), with their progress."""
    async with db.reader() as session:
        named = CrawlTask.batch_name.is_not(None)
        total = await session.scalar(
            select(func.count(func.distinct(CrawlTask.batch_name))).where(named)
        )
        first = func.min(CrawlTask.created_at)
        names = [
            str(name)
            for name in await session.scalars(
                select(CrawlTask.batch_name)
                .where(named)
                .group_by(CrawlTask.batch_name)
                .order_by(first.desc(), CrawlTask.batch_name)
                .limit(limit)
                .offset(offset)
            )
        ]
    found = await _progress(db, names)
    return [found[n] for n in names], int(total or 0)
