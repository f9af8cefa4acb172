"""The task queue: every statement that claims, leases, moves or requeues a task lives here.

Claiming (DESIGN.md decision 1) happens in one short transaction:

1. list candidate domains — active, past their politeness gate, with due pending work —
   ordered by their best task (priority 1 first, then ``scheduled_at``);
2. lock one candidate domain row (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite's
   ``BEGIN IMMEDIATE`` already serializes writers) and re-check its gate;
3. under that lock count the domain's in-flight tasks with a fresh snapshot, so
   ``max_concurrent_requests`` holds across every worker process;
4. lease its best pending tasks (``UPDATE … RETURNING``); a domain with a crawl delay
   gets one task and its gate closes until that request has been sent (``open_gate``).

Every later move is a compare-and-set on (status, lease owner) that writes an event, so
a worker whose lease expired, or whose task an operator paused, loses the race cleanly.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, case, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import CrawlTask, Domain
from forager.db.types import utcnow
from forager.errors import RETRYABLE_ERROR_TYPES
from forager.fetch import breakers
from forager.fetch.throttle import effective_delay
from forager.queue.lifecycle import FETCHING, LEASED, PARSE_LEASED, TaskStatus

S = TaskStatus
# Candidate domains looked at per claim; more only matters when many are saturated at once.
_CANDIDATE_DOMAINS = 16


@dataclass(frozen=True, slots=True)
class ClaimedTask:
    """A task leased to one worker, with what the worker needs to process it."""

    id: int
    url: str
    url_hash: str
    status: str
    domain_id: int
    domain_name: str
    parser_name: str
    user_agent: str
    crawl_delay_seconds: float
    retry_count: int
    max_retries: int
    html_path: str | None
    is_recurring: bool
    crawl_frequency_seconds: int


def _task_columns() -> tuple[Any, ...]:
    return (
        CrawlTask.id,
        CrawlTask.url,
        CrawlTask.url_hash,
        CrawlTask.status,
        CrawlTask.domain_id,
        CrawlTask.parser_name,
        CrawlTask.retry_count,
        CrawlTask.max_retries,
        CrawlTask.html_path,
        CrawlTask.is_recurring,
        CrawlTask.crawl_frequency_seconds,
    )


def _claimed(row: Any, domain: Any) -> ClaimedTask:
    return ClaimedTask(
        id=row.id,
        url=row.url,
        url_hash=row.url_hash,
        status=row.status,
        domain_id=row.domain_id,
        domain_name=domain.domain_name,
        parser_name=row.parser_name or domain.parser_name,
        user_agent=domain.user_agent,
        crawl_delay_seconds=effective_delay(
            domain.crawl_delay_seconds, domain.throttle_delay_seconds
        ),
        retry_count=row.retry_count,
        max_retries=row.max_retries,
        html_path=row.html_path,
        is_recurring=row.is_recurring,
        crawl_frequency_seconds=row.crawl_frequency_seconds,
    )


async def transition(
    session: AsyncSession,
    task_id: int,
    *,
    from_: Sequence[str],
    to: str,
    worker_id: str | None = None,
    event: str | None = None,
    details: dict[str, Any] | None = None,
    via: Sequence[str] = (),
    **values: Any,
) -> bool:
    """Compare-and-set ``task_id`` from one of ``from_`` to ``to``; write the event if it moved.

    With ``worker_id`` the move only happens while that worker still holds the lease.
    ``via`` names statuses passed through inside this same transaction (no other session
    can observe them): each still gets its event, in order.
    """
    table = cast(Table, CrawlTask.__table__)  # Core, not ORM: this is the hot path
    conditions = [table.c.id == task_id, table.c.status.in_(list(from_))]
    if worker_id is not None:
        conditions.append(table.c.lease_owner == worker_id)
    result = await session.execute(
        update(table).where(*conditions).values(status=to, updated_at=utcnow(), **values)
    )
    if not getattr(result, "rowcount", 0):
        return False
    base = {"worker": worker_id} if worker_id else {}
    for step in via:
        audit.record(session, "task", [task_id], step, {"to": step, **base})
    audit.record(session, "task", [task_id], event or to, {"to": to, **base, **(details or {})})
    return True


class TaskQueue:
    """The queue's operations, each in its own short transaction."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings

    def _lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.settings.lease_seconds)

    def retry_delay(self, retry_count: int) -> float:
        """Exponential backoff with ±50 % jitter, capped at ``retry_max_seconds``."""
        base = self.settings.retry_base_seconds * (2**retry_count)
        capped: float = min(self.settings.retry_max_seconds, base)
        return capped * random.uniform(0.5, 1.5)

    # -- claiming -----------------------------------------------------------------------

    async def claim(
        self,
        worker_id: str,
        limit: int = 1,
        *,
        domains: Sequence[str] | None = None,
        fetchers: Sequence[str] | None = None,
    ) -> list[ClaimedTask]:
        """Lease up to ``limit`` due pending tasks, honouring every domain's politeness.

        ``domains`` restricts the claim to those domain names (an agent's allow-list),
        ``fetchers`` to domains fetched with one of those kinds (what an agent can do).
        """
        now = utcnow()
        claimed: list[ClaimedTask] = []
        async with self.db.session() as session:
            for domain_id in await self._candidate_domains(session, now, domains, fetchers):
                if len(claimed) >= limit:
                    break
                claimed += await self._claim_from_domain(
                    session, domain_id, worker_id, now, limit - len(claimed)
                )
        return claimed

    async def _candidate_domains(
        self,
        session: AsyncSession,
        now: datetime,
        only: Sequence[str] | None = None,
        fetchers: Sequence[str] | None = None,
    ) -> list[int]:
        best_task = (
            select(CrawlTask.id)
            .where(
                CrawlTask.domain_id == Domain.id,
                CrawlTask.status == S.PENDING,
                CrawlTask.scheduled_at <= now,
            )
            .order_by(CrawlTask.priority, CrawlTask.scheduled_at, CrawlTask.id)
            .limit(1)
            .scalar_subquery()
            .correlate(Domain)
        )
        ready = (
            select(Domain.id.label("domain_id"), best_task.label("task_id"))
            .where(
                Domain.is_active.is_(True),
                or_(Domain.next_fetch_at.is_(None), Domain.next_fetch_at <= now),
                breakers.allows(Domain, self.settings, now),  # an open breaker: not claimed
                *([Domain.domain_name.in_(list(only))] if only is not None else []),
                *([Domain.fetcher.in_(list(fetchers))] if fetchers is not None else []),
            )
            .subquery()
        )
        rows = await session.execute(
            select(ready.c.domain_id)
            .join(CrawlTask, CrawlTask.id == ready.c.task_id)
            .order_by(CrawlTask.priority, CrawlTask.scheduled_at, CrawlTask.id)
            .limit(_CANDIDATE_DOMAINS)
        )
        return list(rows.scalars())

    async def _claim_from_domain(
        self, session: AsyncSession, domain_id: int, worker_id: str, now: datetime, limit: int
    ) -> list[ClaimedTask]:
        domain = (
            await session.execute(
                select(Domain)
                .where(
                    Domain.id == domain_id,
                    Domain.is_active.is_(True),
                    or_(Domain.next_fetch_at.is_(None), Domain.next_fetch_at <= now),
                    breakers.allows(Domain, self.settings, now),
                )
                .with_for_update(skip_locked=True)
            )
        ).scalar_one_or_none()
        if domain is None:  # another worker holds it, or its gate moved meanwhile
            return []
        in_flight = await session.scalar(
            select(func.count())
            .select_from(CrawlTask)
            .where(CrawlTask.domain_id == domain_id, CrawlTask.status.in_(FETCHING))
        )
        free = domain.max_concurrent_requests - (in_flight or 0)
        # With a delay, one request per gate opening; without, fill the free slots.
        delay = effective_delay(domain.crawl_delay_seconds, domain.throttle_delay_seconds)
        take = min(free, limit, 1 if delay > 0 else limit)
        if take <= 0:
            return []
        pick = (
            select(CrawlTask.id)
            .where(
                CrawlTask.domain_id == domain_id,
                CrawlTask.status == S.PENDING,
                CrawlTask.scheduled_at <= now,
            )
            .order_by(CrawlTask.priority, CrawlTask.scheduled_at, CrawlTask.id)
            .limit(take)
            .with_for_update(skip_locked=True)
        )
        task_ids = list((await session.execute(pick)).scalars())
        if not task_ids:
            return []
        rows = await session.execute(
            update(CrawlTask)
            .where(CrawlTask.id.in_(task_ids), CrawlTask.status == S.PENDING)
            .values(
                status=S.QUEUED,
                lease_owner=worker_id,
                lease_expires_at=self._lease_until(now),
                updated_at=now,
            )
            .returning(*_task_columns())
            .execution_options(synchronize_session=False)
        )
        tasks = [_claimed(row, domain) for row in rows]
        if delay > 0:
            # Closed until the request is really on the wire (see ``open_gate``); a worker
            # that dies before sending leaves it closed only until its lease runs out.
            await session.execute(
                update(Domain)
                .where(Domain.id == domain_id)
                .values(next_fetch_at=self._lease_until(now))
                .execution_options(synchronize_session=False)
            )
        audit.record(
            session, "task", [t.id for t in tasks], S.QUEUED, {"to": S.QUEUED, "worker": worker_id}
        )
        return tasks

    async def claim_parse(self, worker_id: str, limit: int = 1) -> list[ClaimedTask]:
        """Lease downloaded tasks for the parse phase (restart-parsing, expired parse leases)."""
        now = utcnow()
        async with self.db.session() as session:
            pick = (
                select(CrawlTask.id)
                .where(CrawlTask.status == S.DOWNLOADED)
                .order_by(CrawlTask.priority, CrawlTask.scheduled_at, CrawlTask.id)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            task_ids = list((await session.execute(pick)).scalars())
            if not task_ids:
                return []
            rows = (
                await session.execute(
                    update(CrawlTask)
                    .where(CrawlTask.id.in_(task_ids), CrawlTask.status == S.DOWNLOADED)
                    .values(
                        status=S.QUEUED_PARSE,
                        lease_owner=worker_id,
                        lease_expires_at=self._lease_until(now),
                        updated_at=now,
                    )
                    .returning(*_task_columns())
                    .execution_options(synchronize_session=False)
                )
            ).all()
            domains = {
                d.id: d
                for d in (
                    await session.execute(
                        select(Domain).where(Domain.id.in_({r.domain_id for r in rows}))
                    )
                ).scalars()
            }
            tasks = [_claimed(row, domains[row.domain_id]) for row in rows]
            audit.record(
                session,
                "task",
                [t.id for t in tasks],
                S.QUEUED_PARSE,
                {"to": S.QUEUED_PARSE, "worker": worker_id},
            )
        return tasks

    async def next_gate_opening(self) -> datetime | None:
        """When the earliest closed politeness gate with due work opens (for idle sleeping)."""
        now = utcnow()
        has_work = (
            select(CrawlTask.id)
            .where(
                CrawlTask.domain_id == Domain.id,
                CrawlTask.status == S.PENDING,
                CrawlTask.scheduled_at <= now,
            )
            .exists()
        )
        async with self.db.reader() as session:
            return await session.scalar(
                select(func.min(Domain.next_fetch_at)).where(
                    Domain.is_active.is_(True), Domain.next_fetch_at > now, has_work
                )
            )

    # -- phase moves --------------------------------------------------------------------

    async def start_crawl(self, session: AsyncSession, task: ClaimedTask, worker_id: str) -> bool:
        """``queued → crawling``, just before the request goes out."""
        return await transition(
            session,
            task.id,
            from_=[S.QUEUED],
            to=S.CRAWLING,
            worker_id=worker_id,
            started_at=utcnow(),
        )

    async def open_gate(self, session: AsyncSession, task: ClaimedTask) -> None:
        """The request of ``task`` has been sent: its domain opens again ``crawl_delay`` later.

        Measured from the moment the request left, not from the claim, so the delay holds
        between requests as the site sees them, whatever the worker did in between.
        """
        gate = utcnow() + timedelta(seconds=task.crawl_delay_seconds)
        await session.execute(
            update(Domain)
            .where(Domain.id == task.domain_id)
            .values(next_fetch_at=gate)
            .execution_options(synchronize_session=False)
        )

    async def complete(self, session: AsyncSession, task: ClaimedTask, worker_id: str) -> bool:
        """``parsing → completed``; a recurring task gets its ``next_crawl_at``."""
        now = utcnow()
        return await transition(
            session,
            task.id,
            from_=[S.PARSING],
            to=S.COMPLETED,
            worker_id=worker_id,
            completed_at=now,
            next_crawl_at=(
                now + timedelta(seconds=task.crawl_frequency_seconds) if task.is_recurring else None
            ),
            error_type=None,
            error_message=None,
            lease_owner=None,
            lease_expires_at=None,
        )

    async def fail(
        self,
        session: AsyncSession,
        task: ClaimedTask,
        worker_id: str,
        *,
        error_type: str,
        message: str,
        http_status_code: int | None = None,
    ) -> str | None:
        """Retry later with backoff, or fail for good; returns the new status (None: lost lease)."""
        row = (
            await session.execute(
                select(
                    CrawlTask.retry_count,
                    CrawlTask.max_retries,
                    CrawlTask.is_recurring,
                    CrawlTask.crawl_frequency_seconds,
                )
                .where(
                    CrawlTask.id == task.id,
                    CrawlTask.lease_owner == worker_id,
                    CrawlTask.status.in_(LEASED),
                )
                .with_for_update()
            )
        ).one_or_none()
        if row is None:
            return None
        now = utcnow()
        common: dict[str, Any] = {
            "error_type": error_type,
            "error_message": message[:2000],
            "lease_owner": None,
            "lease_expires_at": None,
            "http_status_code": http_status_code,
        }
        if error_type in RETRYABLE_ERROR_TYPES and row.retry_count < row.max_retries:
            delay = self.retry_delay(row.retry_count)
            moved = await transition(
                session,
                task.id,
                from_=LEASED,
                to=S.PENDING,
                worker_id=worker_id,
                event="retry_scheduled",
                details={"error_type": error_type, "retry_count": row.retry_count + 1},
                retry_count=row.retry_count + 1,
                scheduled_at=now + timedelta(seconds=delay),
                started_at=None,
                **common,
            )
            return S.PENDING if moved else None
        moved = await transition(
            session,
            task.id,
            from_=LEASED,
            to=S.FAILED,
            worker_id=worker_id,
            details={"error_type": error_type},
            completed_at=now,
            next_crawl_at=(
                now + timedelta(seconds=row.crawl_frequency_seconds) if row.is_recurring else None
            ),
            **common,
        )
        return S.FAILED if moved else None

    async def release(self, task_id: int, worker_id: str) -> bool:
        """Give a leased task back untouched (graceful shutdown): no retry is consumed."""
        now = utcnow()
        async with self.db.session() as session:
            back = case(
                (CrawlTask.status.in_(PARSE_LEASED), S.DOWNLOADED),
                else_=S.PENDING,
            )
            result = await session.execute(
                update(CrawlTask)
                .where(
                    CrawlTask.id == task_id,
                    CrawlTask.lease_owner == worker_id,
                    CrawlTask.status.in_(LEASED),
                )
                .values(
                    status=back,
                    lease_owner=None,
                    lease_expires_at=None,
                    started_at=None,
                    scheduled_at=now,
                    updated_at=now,
                )
                .returning(CrawlTask.status)
                .execution_options(synchronize_session=False)
            )
            status = result.scalar_one_or_none()
            if status is None:
                return False
            audit.record(
                session, "task", [task_id], "released", {"to": status, "worker": worker_id}
            )
            return True

    async def heartbeat(self, worker_id: str) -> int:
        """Extend the leases of every task ``worker_id`` holds; returns how many."""
        now = utcnow()
        async with self.db.session() as session:
            result = await session.execute(
                update(CrawlTask)
                .where(CrawlTask.lease_owner == worker_id, CrawlTask.status.in_(LEASED))
                .values(lease_expires_at=self._lease_until(now))
                .execution_options(synchronize_session=False)
            )
            return int(getattr(result, "rowcount", 0) or 0)

    # -- scheduler ----------------------------------------------------------------------

    async def reap_expired_leases(self) -> int:
        """Return tasks of dead workers to the queue, consuming exactly one retry each.

        A fetch goes back to ``pending``, a parse to ``downloaded`` (its page is stored);
        a task with no retry left fails.
        """
        now = utcnow()
        exhausted = CrawlTask.retry_count >= CrawlTask.max_retries
        async with self.db.session() as session:
            result = await session.execute(
                update(CrawlTask)
                .where(CrawlTask.status.in_(LEASED), CrawlTask.lease_expires_at < now)
                .values(
                    status=case(
                        (exhausted, S.FAILED),
                        (CrawlTask.status.in_(PARSE_LEASED), S.DOWNLOADED),
                        else_=S.PENDING,
                    ),
                    retry_count=case(
                        (exhausted, CrawlTask.retry_count), else_=CrawlTask.retry_count + 1
                    ),
                    completed_at=case((exhausted, now), else_=CrawlTask.completed_at),
                    scheduled_at=case((exhausted, CrawlTask.scheduled_at), else_=now),
                    error_type="internal",
                    error_message="lease expired: the worker stopped renewing it (crashed or hung)",
                    started_at=None,
                    lease_owner=None,
                    lease_expires_at=None,
                    updated_at=now,
                )
                .returning(CrawlTask.id, CrawlTask.status)
                .execution_options(synchronize_session=False)
            )
            moved = result.all()
            for task_id, status in moved:
                audit.record(session, "task", [task_id], "lease_expired", {"to": status})
        return len(moved)

    async def requeue_due_recrawls(self, limit: int = 1000) -> int:
        """Recurring tasks whose ``next_crawl_at`` has come go back to ``pending``."""
        now = utcnow()
        async with self.db.session() as session:
            due = (
                select(CrawlTask.id)
                .where(
                    CrawlTask.is_recurring.is_(True),
                    CrawlTask.status.in_([S.COMPLETED, S.FAILED]),
                    CrawlTask.next_crawl_at <= now,
                )
                .order_by(CrawlTask.next_crawl_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            ids = list((await session.execute(due)).scalars())
            if not ids:
                return 0
            result = await session.execute(
                update(CrawlTask)
                .where(CrawlTask.id.in_(ids), CrawlTask.status.in_([S.COMPLETED, S.FAILED]))
                .values(
                    status=S.PENDING,
                    scheduled_at=now,
                    retry_count=0,
                    recrawl_count=CrawlTask.recrawl_count + 1,
                    next_crawl_at=None,
                    started_at=None,
                    updated_at=now,
                )
                .returning(CrawlTask.id)
                .execution_options(synchronize_session=False)
            )
            moved = list(result.scalars())
            audit.record(session, "task", moved, "recrawl_due", {"to": S.PENDING})
        return len(moved)
