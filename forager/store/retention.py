"""Page retention: delete stored pages past the limits, never one a task or product still uses.

A fetched page is kept while it is one of its task's newest ``keep_last`` pages *or* younger
than ``days`` (a limit of 0 is off; with both off nothing is deleted). The page a task points
at (``crawl_tasks.html_path``: its latest, the one its product was parsed from and
``restart-parsing`` reads) is never deleted, whatever its age; keys only ever move forward, so a
page that is not the task's latest never becomes it again.

Order: the attempts stop pointing at a page (``page_path`` and ``page_bytes`` cleared, one
transaction per batch) before the object is deleted, so no row ever points at a missing page;
a crash between the two leaves an unreferenced object behind, never a dangling row. Several
processes pruning at once do the same deletes twice, which is harmless.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Select, func, or_, select, update

from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlTask
from forager.db.types import utcnow
from forager.errors import PageStoreError
from forager.store.pages import PageStore

log = logging.getLogger(__name__)

BATCH = 500  # pages per transaction; a stop request is honoured between batches
_DELETES_AT_ONCE = 16


@dataclass(frozen=True, slots=True)
class Retention:
    keep_last: int = 0
    days: float = 0.0

    @property
    def on(self) -> bool:
        return bool(self.keep_last or self.days)


@dataclass(slots=True)
class Pruned:
    pages: int = 0
    bytes: int = 0  # stored (gzip) bytes, of pages whose size was recorded
    failed: int = 0  # objects the store would not delete (left behind, no longer referenced)


def _past_retention(rules: Retention, now: datetime) -> Select[int, str, int | None]:
    """Fetched pages past ``rules`` that their task does not point at, oldest first."""
    a = CrawlAttempt
    newest_first = func.row_number().over(
        partition_by=a.task_id, order_by=(a.started_at.desc(), a.id.desc())
    )
    ranked = (
        select(a.task_id, a.page_path, a.page_bytes, a.started_at, newest_first.label("rank"))
        .where(a.phase == "fetch", a.page_path.is_not(None))
        .subquery()
    )
    past = []
    if rules.keep_last:
        past.append(ranked.c.rank > rules.keep_last)
    if rules.days:
        past.append(ranked.c.started_at < now - timedelta(days=rules.days))
    return (
        select(ranked.c.task_id, ranked.c.page_path, ranked.c.page_bytes)
        .join(CrawlTask, CrawlTask.id == ranked.c.task_id)
        .where(
            *past,
            or_(CrawlTask.html_path.is_(None), CrawlTask.html_path != ranked.c.page_path),
        )
        .order_by(ranked.c.started_at)
    )


async def prune(
    db: Database,
    pages: PageStore,
    rules: Retention,
    *,
    dry_run: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
    now: datetime | None = None,
) -> Pruned:
    """Delete the pages past ``rules`` (``dry_run``: only count them)."""
    done = Pruned()
    if not rules.on:
        return done
    query = _past_retention(rules, now or utcnow())
    if dry_run:
        counted = query.subquery()
        async with db.reader() as session:
            n, size = (
                await session.execute(select(func.count(), func.sum(counted.c.page_bytes)))
            ).one()
        return Pruned(pages=n, bytes=size or 0)
    while not should_stop():
        # Found in a read transaction (no SQLite write lock held during the scan): a page past
        # retention stays past it, since a task only ever points at newer pages.
        async with db.reader() as session:
            rows = (await session.execute(query.limit(BATCH))).all()
        if not rows:
            break
        keys = sorted({path for _, path, _ in rows})
        async with db.session() as session:
            await session.execute(
                update(CrawlAttempt)
                .where(
                    CrawlAttempt.task_id.in_({task_id for task_id, _, _ in rows}),
                    CrawlAttempt.page_path.in_(keys),
                )
                .values(page_path=None, page_bytes=None)
                .execution_options(synchronize_session=False)
            )
        done.pages += len(keys)
        done.bytes += sum(size or 0 for _, _, size in rows)
        done.failed += await _delete(pages, keys)
    return done


async def _delete(pages: PageStore, keys: list[str]) -> int:
    """Delete ``keys`` from the store, a few at a time; the number that failed."""
    gate = asyncio.Semaphore(_DELETES_AT_ONCE)
    failed = 0

    async def one(key: str) -> None:
        nonlocal failed
        async with gate:
            try:
                await pages.delete(key)
            except PageStoreError as exc:
                failed += 1
                log.warning("retention: %s (no row points at it any more)", exc.message)

    await asyncio.gather(*(one(key) for key in keys))
    return failed
