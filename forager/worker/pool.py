"""The worker: claims tasks up to its concurrency and runs them, with monitored side tasks.

Shaped like procrastinate's worker: a bounded set of jobs, a wake-up event with polling as
fallback, named side tasks (heartbeat, scheduler, page retention) restarted when they fail, and
a bounded graceful shutdown that releases whatever did not finish in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from forager.alerts import watch
from forager.alerts.deliver import Deliverer
from forager.config import Settings
from forager.db.engine import Database
from forager.db.types import utcnow
from forager.discovery.admin import rerun_due
from forager.feeds.runs import run_due
from forager.fetch.base import Fetcher
from forager.proxies.retest import retest_due
from forager.queue.door import ClaimedTask, TaskQueue
from forager.queue.lifecycle import TERMINAL
from forager.retention.prune import prune as prune_rows
from forager.store.pages import PageStore
from forager.store.retention import Retention, prune
from forager.worker import presence
from forager.worker.claiming import ClaimLoop
from forager.worker.images import ImageDownloader
from forager.worker.parts import Parts
from forager.worker.pipeline import Pipeline

if TYPE_CHECKING:
    from forager.broker.relay import Relay

log = logging.getLogger(__name__)
# How long a side task (heartbeat, scheduler, re-test) may take to finish its step at shutdown.
SIDE_TASK_GRACE_SECONDS = 10.0
# Tasks in flight at most, as a multiple of the concurrency (requests at once): the rest have
# had their answer and are being parsed or written (``WorkerPool._room``).
DEPTH = 2
# How long a worker trusts its last look at who else claims (``WorkerPool._claims_alone``): a
# worker or agent that starts is seen within this, and a busy worker's claims (several a
# second) do not each read it again.
ALONE_CHECK_SECONDS = 1.0


def new_worker_id(kind: str = "worker") -> str:
    """``host:pid:kind:random`` — unique per process start, readable in the events table."""
    return f"{socket.gethostname()}:{os.getpid()}:{kind}:{secrets.token_hex(3)}"


class WorkerPool:
    """Runs tasks until ``stop()`` is called: up to ``concurrency`` requests at once, and as
    many tasks again whose request is over (their pages parsed and written meanwhile)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        concurrency: int,
        worker_id: str | None = None,
        fetcher: Fetcher | None = None,
        pages: PageStore | None = None,
        run_scheduler: bool = True,
        kind: str = "worker",
        parts: Parts | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.concurrency = concurrency
        self.worker_id = worker_id or new_worker_id()
        self.queue = TaskQueue(db, settings)
        # The composition root's shared parts; without them (tests, scripts) the pool builds
        # and closes its own.
        self._owns_parts = parts is None
        parts = parts or Parts.build(db, settings)
        if fetcher is not None or pages is not None:
            parts = replace(parts, fetchers=fetcher or parts.fetchers, pages=pages or parts.pages)
        self.parts = parts
        self.fetcher = parts.fetchers
        self.pages = parts.pages
        self.pipeline = Pipeline(
            db,
            self.queue,
            parts.fetchers,
            parts.pages,
            parts.box,
            self.worker_id,
            parser=parts.parser,
            writer=parts.writer,
        )
        parts.wake.listen(self.wake)
        self.pipeline.on_answered = self._request_slot_freed
        self.pipeline.last_out = self._last_out
        self.alerts = Deliverer(db, settings, parts.box)
        self.images = ImageDownloader(
            db, settings, parts.box, parts.fetchers, parts.pages, self.worker_id
        )
        self.run_scheduler = run_scheduler
        # Celery dispatch: the relay claims, Celery delivers (``run_delivered``); the pool's
        # own claim loop then claims nothing.
        self.celery = settings.dispatch == "celery"
        self.relay: Relay | None = None
        if self.celery and run_scheduler:
            from forager.broker.relay import Relay  # Celery is imported by its users only

            self.relay = Relay(db, settings)
        self.kind = kind
        self.jobs: dict[int, asyncio.Task[str | None]] = {}
        self.processed = 0
        self.ended = 0  # jobs that left their task in a terminal status (completed, failed …)
        self.on_ended: Callable[[int], None] = lambda _ended: None  # told each new ``ended``
        self._side_stop = asyncio.Event()  # set once drained: heartbeats run until then
        self._batch = max(1, concurrency // 4)
        self._alone = False  # the only claimer at the last look (``_claims_alone``)
        self._alone_checked = -ALONE_CHECK_SECONDS  # monotonic time of that look
        self.claiming = ClaimLoop(
            settings,
            f"worker {self.worker_id}",
            room=self._room,
            may_claim=self._may_claim,
            claim=self._claim,
            hand_out=self._hand_out,
            nothing_due=self._next_gate,
            then_claim=self._claim_parse,
        )
        # Self-supervision (issue 15): why this process stopped to start afresh, if it did.
        self.recycle_reason: str | None = None
        self._started = time.monotonic()
        self._rows_pruning = False  # row retention's first step only arms it

    def wake(self) -> None:
        """New work may be claimable now (a submit, a finished job)."""
        self.claiming.wake()

    def stop(self) -> None:
        """Stop claiming; ``run`` then drains in-flight tasks and returns."""
        self.claiming.stop()

    async def run(self) -> None:
        side = [
            self._supervise("heartbeat", self._heartbeat, self.settings.heartbeat_seconds),
        ]
        if self.run_scheduler:
            side.append(
                self._supervise("scheduler", self._schedule, self.settings.scheduler_seconds)
            )
            side.append(
                self._supervise("proxy-retest", self._retest, self.settings.scheduler_seconds)
            )
            if self.settings.page_retention_on:
                every = self.settings.page_retention_interval_seconds
                side.append(self._supervise("page-retention", self._prune_pages, every))
            every = self.settings.retention_interval_seconds
            side.append(self._supervise("row-retention", self._prune_rows, every))
            side.append(self._supervise("alerts", self._deliver, self.settings.alert_poll_seconds))
            every = self.settings.alert_evaluate_seconds
            side.append(self._supervise("alert-rules", self._evaluate_alerts, every))
            side.append(
                self._supervise("images", self._download_images, self.settings.image_poll_seconds)
            )
            side.append(self._supervise("feeds", self._run_feeds, self.settings.scheduler_seconds))
        if self.relay is not None:
            side.append(self._supervise("relay", self._relay, self.settings.poll_seconds))
        if self.parts.listener is not None and not self.celery:
            # PostgreSQL: a NOTIFY from any process wakes the claim loop (``parts.wake``).
            side.append(self.parts.listener.run(self._side_stop))
        side_tasks = [asyncio.create_task(coro) for coro in side]
        log.info("worker %s started (concurrency %d)", self.worker_id, self.concurrency)
        try:
            await self.claiming.run()
            await self._drain()
        finally:
            # Side tasks end between steps, never inside one: a step cancelled mid-transaction
            # can leave a SQLite connection holding the write lock, and every later write then
            # waits out the busy timeout. Only a step stuck past the grace is cancelled.
            self._side_stop.set()
            _, stuck = await asyncio.wait(side_tasks, timeout=SIDE_TASK_GRACE_SECONDS)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*side_tasks, return_exceptions=True)
            await self.alerts.aclose()
            if self.relay is not None:
                self.relay.close()
            if self._owns_parts:
                await self.parts.aclose()
            with contextlib.suppress(Exception):  # the database may be what stopped us
                await self._report(stopped=True)
            log.info("worker %s stopped after %d tasks", self.worker_id, self.processed)

    def _room(self) -> int:
        """Tasks to claim now. Claiming alone (``_alone``): free request slots, while the
        tasks whose request is over (in the parse processes, or waiting for the writer) are
        no more than the concurrency again; without that, a worker's fetches waited for the
        pages before them to be parsed and written, and its parse processes for the next
        fetches: each stage in turn, not side by side. Beside other claimers: free task
        slots, every task counting until it is written (see ``_claim``)."""
        if not self._alone:
            return self.concurrency - len(self.jobs)
        requests = len(self.jobs) - len(self.pipeline.answered)
        return min(self.concurrency - requests, DEPTH * self.concurrency - len(self.jobs))

    def _last_out(self) -> bool:
        """Whether every other job of the pool waits in the writer (``pipeline.writing``): no
        task of the pool is left to join the group, so waiting for more only delays it (and
        beside other claimers, tasks hold their slots until written)."""
        return len(self.jobs) <= self.pipeline.writing + 1

    def _request_slot_freed(self) -> None:
        if self._alone:  # beside other claimers the task still holds its slot
            self.wake()

    def _may_claim(self, free: int) -> bool:
        if self.celery:
            return False
        # Claim in batches while busy: one claim transaction per slot would cost more than
        # the work it hands out.
        return free >= self._batch or (free > 0 and not self.jobs)

    async def _claim(self, free: int) -> list[ClaimedTask]:
        # Only a worker claiming alone counts its answered tasks out of their domains' slots:
        # the others would see those slots taken until the tasks are written, and the one
        # whose answers came would take every slot it freed (measured: one worker of two on
        # three domains of two slots fetched 87–93 of 97 pages).
        answered = list(self.pipeline.answered) if await self._claims_alone() else []
        return await self.queue.claim(self.worker_id, free, start=True, answered=answered)

    async def _claims_alone(self) -> bool:
        """Whether no other worker process is live and no agent connected, read again once
        ``ALONE_CHECK_SECONDS`` have passed since the last look."""
        now = time.monotonic()
        if now - self._alone_checked >= ALONE_CHECK_SECONDS:
            seen = utcnow() - presence.alive_window(self.settings)
            self._alone = await self.queue.claims_alone(self.worker_id, seen)
            self._alone_checked = now
        return self._alone

    async def _claim_parse(self, free: int) -> list[ClaimedTask]:
        """Re-parses (``restart-parsing``, expired parse leases) in the room fetches left;
        claimed once those fetches have started."""
        return await self.queue.claim_parse(self.worker_id, free)

    async def _hand_out(self, task: ClaimedTask) -> None:
        self._start(task)

    async def run_delivered(self, task_id: int, owner: str) -> str | None:
        """Celery dispatch: take a task the relay claimed under ``owner`` and run it as one of
        this pool's jobs (heartbeats, graceful stop); the status it ended in, or None when
        there was nothing to take (a duplicate or stale message, a paused task)."""
        task = await self.queue.take(task_id, owner, self.worker_id)
        if task is None:
            log.info("task %s: nothing to take (already taken, moved or expired)", task_id)
            return None
        self._start(task)
        return await self.jobs[task.id]

    async def _next_gate(self) -> float | None:
        """Nothing was due: wake when the next politeness gate opens, if before the poll."""
        gate = await self.queue.next_gate_opening()
        return None if gate is None else (gate - utcnow()).total_seconds()

    def _start(self, task: ClaimedTask) -> None:
        job = asyncio.create_task(self._run_job(task), name=f"task-{task.id}")
        self.jobs[task.id] = job

    async def _run_job(self, task: ClaimedTask) -> str | None:
        try:
            status = await self.pipeline.run(task)
            if status in TERMINAL:
                self.ended += 1
                self.on_ended(self.ended)
            return status
        except asyncio.CancelledError:
            # Shutdown deadline passed: give the task back without consuming a retry.
            await asyncio.shield(self.queue.release(task.id, self.worker_id))
            raise
        finally:
            self.jobs.pop(task.id, None)
            self.processed += 1
            self.wake()

    async def _drain(self) -> None:
        if not self.jobs:
            return
        log.info(
            "finishing %d in-flight tasks (up to %.0f s)",
            len(self.jobs),
            self.settings.shutdown_seconds,
        )
        pending = list(self.jobs.values())
        _, still_running = await asyncio.wait(pending, timeout=self.settings.shutdown_seconds)
        for job in still_running:
            job.cancel()
        if still_running:
            log.warning("released %d unfinished tasks back to the queue", len(still_running))
            await asyncio.gather(*still_running, return_exceptions=True)

    async def _heartbeat(self) -> None:
        if self.jobs:
            await self.queue.heartbeat(self.worker_id)
        await self._report()

    async def _report(self, stopped: bool = False) -> None:
        memory, cpu = presence.process_tree_usage()
        await presence.report(
            self.db,
            self.worker_id,
            kind=self.kind,
            concurrency=self.concurrency,
            in_flight=len(self.jobs),
            processed=self.processed,
            stopped=stopped,
            memory_bytes=memory,
            cpu_percent=cpu,
            recycled=(self.recycle_reason is not None) if stopped else None,
        )
        if not stopped:
            self._check_recycle(memory)

    def _check_recycle(self, memory: int) -> None:
        """A ``forager worker`` past its memory or lifetime limit stops gracefully, to be
        started afresh (the command re-executes itself): it must not grow without bound."""
        s = self.settings
        if self.kind != "worker" or self.recycle_reason is not None:
            return
        if s.worker_memory_limit_mb and memory > s.worker_memory_limit_mb * 1024 * 1024:
            self.recycle_reason = f"memory {memory // (1024 * 1024)} MB"
        elif s.worker_max_lifetime_hours and (
            time.monotonic() - self._started > s.worker_max_lifetime_hours * 3600
        ):
            self.recycle_reason = "lifetime"
        if self.recycle_reason is not None:
            log.warning("worker %s recycles itself (%s)", self.worker_id, self.recycle_reason)
            self.stop()

    async def _deliver(self) -> None:
        """Send the alert deliveries that are due (webhooks, Apprise), retrying failed ones."""
        await self.alerts.step()

    async def _evaluate_alerts(self) -> None:
        """Measure the operational alert rules; open and clear their episodes."""
        await watch.evaluate(self.db)

    async def _download_images(self) -> None:
        """Store the due product images of the domains that download them (usually: none)."""
        await self.images.step()

    async def _relay(self) -> None:
        """Celery dispatch: claim due work into the outbox and publish it to RabbitMQ."""
        if self.relay is not None:
            await self.relay.step()

    async def _run_feeds(self) -> None:
        """Run the feeds that are due (each under a lease: one process at a time)."""
        await run_due(self.db, self.settings, self.pages, self.worker_id)

    async def _retest(self) -> None:
        """Re-test proxies their failures disabled; enable the ones that work again."""
        result = await retest_due(self.db, self.settings, self.parts.box, self.parts.fetchers)
        if result.enabled:
            log.info("proxies %s pass their re-test: enabled again", result.enabled)

    async def _prune_pages(self) -> None:
        """Delete stored pages past retention; stops between batches once the pool stops."""
        s = self.settings
        rules = Retention(s.page_retention_keep_last, s.page_retention_days)
        pruned = await prune(self.db, self.pages, rules, should_stop=self._stopping)
        if pruned.pages:
            log.info("retention deleted %d stored pages (%d bytes)", pruned.pages, pruned.bytes)

    async def _prune_rows(self) -> None:
        """Delete rows past retention (events, attempts …), one interval after start first:
        a pool's start stays light, and a short-lived one never prunes."""
        if not self._rows_pruning:
            self._rows_pruning = True
            return
        await prune_rows(self.db, self.settings, should_stop=self._stopping)

    def _stopping(self) -> bool:
        return self.claiming.stopping or self._side_stop.is_set()

    async def _schedule(self) -> None:
        reaped = await self.queue.reap_expired_leases()
        due = await self.queue.requeue_due_recrawls()
        reruns = await rerun_due(self.db, self.settings, utcnow())  # scheduled crawl jobs
        if reaped:
            log.warning("returned %d tasks with expired leases to the queue", reaped)
        if reruns:
            log.info("crawl jobs %s started their next run on schedule", reruns)
        if reaped or due or reruns:
            self.wake()

    async def _supervise(
        self, name: str, step: Callable[[], Awaitable[None]], every: float
    ) -> None:
        """Run ``step`` every ``every`` seconds until the pool has drained; a failure is
        logged, not fatal."""
        while not self._side_stop.is_set():
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("side task %s failed; retrying in %.1f s", name, every)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._side_stop.wait(), every)
