"""The scheduler's two sweeps: expired leases back to the queue (each lost try recorded as an
attempt), due recrawls back to pending.

Each runs in the caller's transaction (see moves.py for the rule).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Row, case, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db import audit
from forager.db.models import CrawlAttempt, CrawlTask
from forager.queue.announce import new_work
from forager.queue.lifecycle import LEASED, PARSE_LEASED, TaskStatus

S = TaskStatus


# A reaped task as its lease left it: id, status, lease_owner, started_at, updated_at, html_path.
_Held = Row[int, str, str | None, datetime | None, datetime, str | None]
# Tasks reaped per statement: the ids go back as bound parameters (PostgreSQL takes 32,767).
REAP_BATCH = 1000
LOST_FETCH = (
    "lease expired: worker {worker} stopped renewing it (crashed or hung); this try was lost, "
    "it may or may not have reached the site"
)
LOST_PARSE = (
    "lease expired: worker {worker} stopped renewing it (crashed or hung) while parsing the "
    "stored page; this parse was lost"
)


async def reap_expired_leases(session: AsyncSession, now: datetime) -> int:
    """Return tasks of dead workers to the queue, consuming exactly one retry each.

    A fetch goes back to ``pending``, a parse to ``downloaded`` (its page is stored);
    a task with no retry left fails. The try each lease held is an attempt row of its
    phase (``lease_expired``): its worker and start, read from the locked row before the move
    clears them, so a task's history has every try, the lost ones too. Rows another
    transaction holds are skipped (their reaper writes them), so two reapers write one row.
    """
    reaped = 0
    while True:
        held, moved = await _reap_batch(session, now)
        reaped += moved
        if held < REAP_BATCH or not moved:
            return reaped


async def _reap_batch(session: AsyncSession, now: datetime) -> tuple[int, int]:
    """Up to ``REAP_BATCH`` expired leases: (how many were held, how many moved)."""
    expired = (CrawlTask.status.in_(LEASED), CrawlTask.lease_expires_at < now)
    held = await session.execute(
        select(
            CrawlTask.id,
            CrawlTask.status,
            CrawlTask.lease_owner,
            CrawlTask.started_at,
            CrawlTask.updated_at,
            CrawlTask.html_path,
        )
        .where(*expired)
        .order_by(CrawlTask.id)
        .limit(REAP_BATCH)
        .with_for_update(skip_locked=True)
    )
    lost = {row.id: row for row in held}
    if not lost:
        return 0, 0
    exhausted = CrawlTask.retry_count >= CrawlTask.max_retries
    result = await session.execute(
        update(CrawlTask)
        .where(CrawlTask.id.in_(lost), *expired)
        .values(
            status=case(
                (exhausted, S.FAILED),
                (CrawlTask.status.in_(PARSE_LEASED), S.DOWNLOADED),
                else_=S.PENDING,
            ),
            retry_count=case((exhausted, CrawlTask.retry_count), else_=CrawlTask.retry_count + 1),
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
    if moved:
        await session.execute(
            insert(CrawlAttempt),
            [_lost_try(lost[task_id], status, now) for task_id, status in moved],
        )
    for task_id, status in moved:
        audit.record(session, "task", [task_id], "lease_expired", {"to": status})
    if any(status != S.FAILED for _, status in moved):
        await new_work(session)  # due again at once
    return len(lost), len(moved)


def _lost_try(held: _Held, status: str, now: datetime) -> dict[str, Any]:
    """The attempt row of the try a reaped lease held.

    A fetch lease's try began when the request was about to go out (``started_at``), or when
    the task was claimed if it never got that far; a parse lease's when the task moved to
    ``queued_parse`` / ``parsing`` (its ``updated_at``: renewals do not touch it). The row's
    phase is the lease's: a lost parse is a parse try of the stored page, not a fetch.
    """
    parse = held.status in PARSE_LEASED
    began = held.updated_at if parse else held.started_at or held.updated_at
    message = LOST_PARSE if parse else LOST_FETCH
    return {
        "task_id": held.id,
        "worker_id": held.lease_owner,
        "phase": "parse" if parse else "fetch",
        "started_at": began or now,
        "finished_at": now,
        "outcome": "failed" if status == S.FAILED else "retry",
        "page_path": held.html_path if parse else None,
        "error_type": "lease_expired",
        "error_message": message.format(worker=held.lease_owner),
    }


async def requeue_due_recrawls(session: AsyncSession, now: datetime, limit: int = 1000) -> int:
    """Recurring tasks whose ``next_crawl_at`` has come go back to ``pending``."""
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
    if moved:
        await new_work(session)
    return len(moved)
