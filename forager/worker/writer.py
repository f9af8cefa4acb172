"""One writer per process: finished tasks are committed in groups, not one transaction each.

A task whose page is fetched, stored and parsed (or whose fetch or parse failed) becomes a
``Finish``; the writer gathers them for ``FORAGER_WRITER_INTERVAL_SECONDS`` or
``FORAGER_WRITER_BATCH_SIZE`` tasks, or until a ``Finish`` says nothing more is coming from its
worker (``last``: every other task of the worker pool waits in the writer already), and writes
the group in one transaction: the tasks' moves
(one locked compare-and-set read, one set-based update), attempts, audit events, products,
images, price history and items (with their versions) as multi-row inserts, and the
fetch-policy bookkeeping per domain, and the links crawl jobs found (within their budgets).
A task taken away meanwhile (paused, cancelled, lease lost) is recorded as a ``discarded``
attempt and its product is not written.

If the transaction fails (the database restarted, a connection was cut) nothing of it was
written: the group is tried again, then task by task, so one bad row cannot hold up the others;
a task that still cannot be written fails ``internal``, or keeps its lease until the reaper
returns it. Each caller awaits its own task's outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.errors import FetchError
from forager.items.persist import ItemBatch, ItemInput, save_items
from forager.parse.base import ProductRecord
from forager.politeness.outcomes import Judged, Outcome, judge
from forager.products.persist import ProductInput, save_products
from forager.proxies.selection import ProxyChoice
from forager.queue.door import Discovery, Ending, TaskQueue
from forager.queue.lifecycle import TaskStatus
from forager.worker.policy import FetchPolicy

log = logging.getLogger(__name__)
S = TaskStatus
_RETRIES = 3  # tries of a group, then of each task alone, before giving up on it


@dataclass(slots=True)
class Finish:
    """A task whose work is done, waiting for the writer.

    ``ending`` is its move and its try (the queue records the try's attempts); ``fetch_error``
    is a failed fetch that politeness still has to book (the proxy's verdict, the domain's
    breaker and delay). It is judged when the ``Finish`` is made, in the fetch phase and with no
    database (``politeness.outcomes.judge``): a block page is re-typed ``blocked`` and the
    ending fails with the judged error, not before the site's ``Retry-After``.
    """

    ending: Ending
    record: ProductRecord | None = None
    items: ItemBatch | None = None  # the page's items (None: it gave none)
    proxy: ProxyChoice | None = None
    fetch_error: FetchError | None = None
    judged: Judged | None = None
    answered_ms: int | None = None  # the site answered (a direct or proxied success)
    open_gate: bool = False  # the domain's gate is still closed (the request never left)
    discovery: Discovery | None = None  # a crawl job's links found on the page
    # Nothing more is coming from its worker pool (every other task of it waits in the writer):
    # the group is written now instead of after the interval.
    last: bool = False
    done: asyncio.Future[str | None] = field(default_factory=lambda: _future())

    def __post_init__(self) -> None:
        exc = self.fetch_error
        if exc is not None and self.judged is None:
            self.judged = judge(exc)
            self.ending.error = (exc.error_type, exc.message, exc.status_code)
            self.ending.not_before = self.judged.retry_after


def _future() -> asyncio.Future[str | None]:
    return asyncio.get_running_loop().create_future()


class GroupWriter:
    """Commits ``Finish``es in groups; ``finish`` returns the task's new status (None: lost)."""

    def __init__(self, db: Database, settings: Settings, box: SecretBox | None) -> None:
        self.db = db
        self.settings = settings
        self.queue = TaskQueue(db, settings)
        self.policy = FetchPolicy(db, settings, box, "writer")
        self._pending: list[Finish] = []
        self._ready = asyncio.Event()
        self._full = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._closing = False

    async def finish(self, item: Finish) -> str | None:
        """Queue ``item`` for the next group and wait until it is written."""
        if self._runner is None:
            self._runner = asyncio.create_task(self._run(), name="writer")
        self._pending.append(item)
        self._ready.set()
        if item.last or len(self._pending) >= self.settings.writer_batch_size:
            self._full.set()
        return await asyncio.shield(item.done)

    async def aclose(self) -> None:
        """Write what is queued, then stop."""
        self._closing = True
        self._full.set()
        self._ready.set()
        if self._runner is not None:
            await self._runner
            self._runner = None

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            if not self._pending:
                if self._closing:
                    return
                self._ready.clear()
                continue
            with contextlib.suppress(TimeoutError):  # gather a group, unless it is full
                await asyncio.wait_for(self._full.wait(), self.settings.writer_interval_seconds)
            batch = self._pending[: self.settings.writer_batch_size]
            del self._pending[: len(batch)]
            if not self._closing and not self._written_now(self._pending):
                self._full.clear()
            await self._commit(batch)

    def _written_now(self, pending: list[Finish]) -> bool:
        """The group left over is full, or its last item's pool has nothing more to send."""
        full = len(pending) >= self.settings.writer_batch_size
        return full or any(item.last for item in pending)

    async def _commit(self, batch: list[Finish]) -> None:
        statuses = await self._try(batch)
        if statuses is None and len(batch) > 1:
            log.warning("writing %d finished tasks failed; writing them one by one", len(batch))
            for item in batch:
                await self._commit([item])
            return
        if statuses is None:
            statuses = await self._fail_internal(batch[0])
        for item in batch:
            if not item.done.done():
                item.done.set_result(statuses.get(item.ending.task.id))

    async def _try(self, batch: list[Finish]) -> dict[int, str] | None:
        pause = 0.1
        for attempt in range(_RETRIES):
            try:
                async with self.db.session() as session:
                    return await self._write(session, batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("writing %d finished tasks failed (try %d)", len(batch), attempt + 1)
                await asyncio.sleep(pause)
                pause *= 4
        return None

    async def _fail_internal(self, item: Finish) -> dict[int, str]:
        """A task that cannot be written fails ``internal``; if even that fails, its lease runs
        out and the reaper gives it back to the queue."""
        task = item.ending.task
        try:
            async with self.db.session() as session:
                status = await self.queue.fail(
                    session,
                    task,
                    item.ending.worker_id,
                    error_type="internal",
                    message="the worker could not record this task's result",
                )
        except Exception:
            log.exception("task %s: its result is lost; its lease will expire", task.id)
            return {}
        return {task.id: status} if status else {}

    async def _write(self, session: AsyncSession, batch: list[Finish]) -> dict[int, str]:
        """One group in the caller's transaction (the order matters: see each step)."""
        for item in batch:
            if item.record is not None:  # its parse attempt names the rules the record breaks
                item.ending.quality_issues = item.record.quality_issues
        statuses = await self.queue.settle(session, [i.ending for i in batch])
        # A crawl job's links are queued with the page that found them, or not at all.
        found = [
            i.discovery
            for i in batch
            if i.discovery is not None and statuses.get(i.ending.task.id) == S.COMPLETED
        ]
        if found:
            await self.queue.discover(session, found)
        saving = [
            i
            for i in batch
            if i.record is not None and statuses.get(i.ending.task.id) == S.COMPLETED
        ]
        saved = await save_products(
            session,
            [
                ProductInput(
                    i.ending.task.domain_id,
                    i.ending.task.id,
                    i.ending.task.url,
                    i.ending.task.url_hash,
                    i.record,
                    # A fetch of an adaptive task says what changed; a reparse saw nothing new.
                    watch=i.ending.task.adaptive is not None and i.ending.fetched is not None,
                )
                for i in saving
                if i.record is not None
            ],
        )
        signals = [
            (item.ending.task, result.signal)
            for item, result in zip(saving, saved, strict=True)
            if result.signal is not None
        ]
        if signals:
            await self.queue.adapt(session, signals)
        await save_items(
            session,
            [
                ItemInput(i.ending.task.domain_id, i.ending.task.id, i.items)
                for i in batch
                if i.items is not None and statuses.get(i.ending.task.id) == S.COMPLETED
            ],
        )
        # Last, politeness: the proxies told, then the domains' rows (``Outcomes.book`` says
        # why last).
        await self.policy.book(
            session,
            [
                Outcome(
                    i.ending.task.domain_id,
                    i.proxy,
                    answered_ms=i.answered_ms,
                    error=i.fetch_error,
                    judged=i.judged,
                    reopen=i.ending.task.crawl_delay_seconds if i.open_gate else None,
                )
                for i in batch
            ],
        )
        return statuses
