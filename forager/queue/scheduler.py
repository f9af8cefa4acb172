"""The scheduler's two sweeps: expired leases back to the queue, due recrawls back to pending.

Each runs in the caller's transaction (see moves.py for the rule).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import case, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db import audit
from forager.db.models import CrawlTask
from forager.queue.lifecycle import LEASED, PARSE_LEASED, TaskStatus

S = TaskStatus


async def reap_expired_leases(session: AsyncSession, now: datetime) -> int:
    """Return tasks of dead workers to the queue, consuming exactly one retry each.

    A fetch goes back to ``pending``, a parse to ``downloaded`` (its page is stored);
    a task with no retry left fails.
    """
    exhausted = CrawlTask.retry_count >= CrawlTask.max_retries
    result = await session.execute(
        update(CrawlTask)
        .where(CrawlTask.status.in_(LEASED), CrawlTask.lease_expires_at < now)
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
    for task_id, status in moved:
        audit.record(session, "task", [task_id], "lease_expired", {"to": status})
    return len(moved)


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
    return len(moved)
