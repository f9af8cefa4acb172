"""Celery dispatch's side of the queue: claims into the outbox, and a worker taking a task.

The database stays the source of truth (DESIGN.md decision 1). The relay claims due work with
the same statements as a worker (``claim.claim_from_domain``, ``claim.claim_parse``), under its
own lease owner, and writes one ``dispatch_outbox`` row per task in that same transaction. A
Celery worker that receives a task id takes it with one compare-and-set on
``(id, status, lease_owner)``: the lease moves to the worker (and a fetch on to ``crawling``),
so a duplicate or stale message finds nothing to take. A message that is lost leaves the task
leased to the relay until its lease expires; the scheduler then makes it due again.

Everything runs in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import audit
from forager.db.models import CrawlTask, DispatchOutbox, Domain
from forager.queue import claim as claiming
from forager.queue.lifecycle import TaskStatus
from forager.queue.tasks import ClaimedTask

S = TaskStatus
# Lease owners of the relay's claims start with this; a worker's never do.
OWNER_PREFIX = "celery:"
PRIORITY_QUEUE = "priority_queue"
CRAWL_QUEUE = "crawl_queue"
PARSE_QUEUE = "parse_queue"
QUEUES = (PRIORITY_QUEUE, CRAWL_QUEUE, PARSE_QUEUE)
# Tasks of this priority or better go to ``priority_queue`` (seed crawler-architecture.md).
URGENT = 2
_WAITING = (S.QUEUED, S.QUEUED_PARSE)


@dataclass(frozen=True, slots=True)
class Message:
    """One outbox row to publish: the task id, its queue and the claim's lease owner."""

    id: int
    task_id: int
    queue: str
    lease_owner: str


def queue_for(priority: int, parse: bool) -> str:
    """``priority_queue`` for priority ≤ 2, else ``parse_queue`` for re-parses, else
    ``crawl_queue``."""
    if priority <= URGENT:
        return PRIORITY_QUEUE
    return PARSE_QUEUE if parse else CRAWL_QUEUE


async def waiting(session: AsyncSession) -> int:
    """Tasks claimed for Celery and not yet taken by a worker (in the outbox or in RabbitMQ)."""
    n = await session.scalar(
        select(func.count())
        .select_from(CrawlTask)
        .where(CrawlTask.status.in_(_WAITING), CrawlTask.lease_owner.startswith(OWNER_PREFIX))
    )
    return int(n or 0)


async def claim_into_outbox(
    session: AsyncSession,
    settings: Settings,
    owner: str,
    now: datetime,
    limit: int,
    lease_until: datetime,
) -> int:
    """Claim up to ``limit`` due tasks (fetches, then re-parses) under ``owner`` and write
    their outbox rows; returns how many."""
    tasks: list[ClaimedTask] = []
    for domain_id in await claiming.candidate_domains(session, settings, now):
        if len(tasks) >= limit:
            break
        tasks += await claiming.claim_from_domain(
            session, settings, domain_id, owner, now, limit - len(tasks), lease_until
        )
    if len(tasks) < limit:
        tasks += await claiming.claim_parse(session, owner, now, limit - len(tasks), lease_until)
    if not tasks:
        return 0
    rows = await session.execute(
        select(CrawlTask.id, CrawlTask.priority).where(CrawlTask.id.in_([t.id for t in tasks]))
    )
    priorities: dict[int, int] = {row.id: row.priority for row in rows}
    await session.execute(
        insert(DispatchOutbox),
        [
            {
                "task_id": t.id,
                "queue": queue_for(priorities[t.id], t.status == S.QUEUED_PARSE),
                "lease_owner": owner,
                "created_at": now,
            }
            for t in tasks
        ],
    )
    return len(tasks)


async def unsent(session: AsyncSession, limit: int) -> list[Message]:
    """The oldest unsent outbox rows, locked (``SKIP LOCKED``) until the caller commits."""
    rows = await session.execute(
        select(
            DispatchOutbox.id,
            DispatchOutbox.task_id,
            DispatchOutbox.queue,
            DispatchOutbox.lease_owner,
        )
        .where(DispatchOutbox.sent_at.is_(None))
        .order_by(DispatchOutbox.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [Message(*row) for row in rows]


async def mark_sent(session: AsyncSession, ids: Sequence[int], now: datetime) -> None:
    """RabbitMQ confirmed these rows' messages."""
    await session.execute(
        update(DispatchOutbox)
        .where(DispatchOutbox.id.in_(list(ids)))
        .values(sent_at=now)
        .execution_options(synchronize_session=False)
    )


async def forget_sent(session: AsyncSession, before: datetime) -> int:
    """Delete rows sent before ``before`` (the outbox is a queue, not a history)."""
    result = await session.execute(
        delete(DispatchOutbox)
        .where(DispatchOutbox.sent_at < before)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def take(
    session: AsyncSession,
    task_id: int,
    owner: str,
    worker_id: str,
    now: datetime,
    lease_until: datetime,
) -> ClaimedTask | None:
    """Move the relay's lease on ``task_id`` to ``worker_id`` (a fetch on to ``crawling``);
    None when the task is no longer waiting under ``owner`` (a duplicate or stale message, a
    pause or cancel, an expired lease)."""
    fetch = CrawlTask.status == S.QUEUED
    row = (
        await session.execute(
            update(CrawlTask)
            .where(
                CrawlTask.id == task_id,
                CrawlTask.lease_owner == owner,
                CrawlTask.status.in_(_WAITING),
            )
            .values(
                status=case((fetch, S.CRAWLING), else_=CrawlTask.status),
                started_at=case((fetch, now), else_=CrawlTask.started_at),
                lease_owner=worker_id,
                lease_expires_at=lease_until,
                updated_at=now,
            )
            .returning(*claiming.TASK_COLUMNS)
            .execution_options(synchronize_session=False)
        )
    ).one_or_none()
    if row is None:
        return None
    domain = (
        await session.execute(select(*claiming.DOMAIN_COLUMNS).where(Domain.id == row.domain_id))
    ).one()
    if row.status == S.CRAWLING:
        audit.record(
            session, "task", [task_id], S.CRAWLING, {"to": S.CRAWLING, "worker": worker_id}
        )
    return claiming.as_claimed(row, domain)
