"""The monitor runner: leases monitors, runs each under a ``ScraperContext``, gives them back.

One ``MonitorRunner`` per process (``forager worker``, and ``serve`` with built-in workers).
Every ``monitor_claim_seconds`` it renews the leases it holds (a monitor paused, deleted or
taken over is stopped) and claims free or expired ones up to ``monitor_slots``. Each monitor
runs in its own asyncio task (``MonitorLoop``): poll (fetch, then read the page in a parse
process), retry by the seed's schedule (1, 2, 4, 8, 16 s) behind the monitor's breaker, store
what changed, adapt the interval, restart the run when the context says so. ``stop()`` is
graceful: every loop finishes its cycle, writes a last health sample, and the runner releases
the leases so another process may take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from datetime import datetime
from typing import Any

import psutil
from sqlalchemy.exc import SQLAlchemyError

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import breakers
from forager.db.engine import Database
from forager.db.models import Monitor
from forager.db.types import utcnow
from forager.errors import ForagerError, ParseError
from forager.fetch.base import Fetcher, FetchRequest
from forager.monitors import admin, writes
from forager.monitors.context import ScraperContext, health_of
from forager.monitors.extract import content_hash
from forager.monitors.pending import PendingSnapshot, SnapshotQueue
from forager.monitors.policy import Hold, MonitorPolicy, Turn
from forager.monitors.window import LATENCY_BUCKETS, PollWindows, bucket_of
from forager.worker.parsing import ParseJob, ParsePool

log = logging.getLogger(__name__)

# Adaptive polling: faster while the data changes, slower while it does not or polls fail.
FASTER, SLOWER, BACKOFF = 0.5, 1.25, 2.0
# How often a runner deletes health samples and resolved errors past their retention.
CLEANUP_SECONDS = 3600.0


def next_interval(current: float, outcome: str, low: float, high: float) -> float:
    """The interval after a cycle whose ``outcome`` is changed / unchanged / failed."""
    factor = {"changed": FASTER, "unchanged": SLOWER}.get(outcome, BACKOFF)
    return min(high, max(low, current * factor))


# Adaptive timeouts: a poll's fetch may take TIMEOUT_FACTOR × its usual time (a moving average
# of successful polls), within [monitor_min_timeout_seconds, monitor_page_timeout_seconds]; a
# poll that times out doubles the budget of the next one. Reading the page has the parse
# processes' budget (FORAGER_PARSE_TIMEOUT_SECONDS), as a task's page does.
TIMEOUT_FACTOR, LATENCY_WEIGHT = 5.0, 0.2


def poll_timeout(average_ms: float | None, settings: Settings) -> float:
    """The time budget of the next poll given the average latency of successful ones."""
    ceiling = settings.monitor_page_timeout_seconds
    if average_ms is None:
        return ceiling
    floor = min(settings.monitor_min_timeout_seconds, ceiling)
    return min(ceiling, max(floor, TIMEOUT_FACTOR * average_ms / 1000))


def retry_delay(attempt: int, settings: Settings) -> float:
    """Delay before retry ``attempt`` (0-based): base, 2×base, 4×base … up to the maximum."""
    return float(
        min(settings.monitor_retry_max_seconds, settings.monitor_retry_base_seconds * 2**attempt)
    )


def _failure(error_type: str, message: str) -> ForagerError:
    """The error a parse process answered, as the exception a failed poll records."""
    exc = ForagerError(message) if error_type == "internal" else ParseError(message)
    exc.error_type = error_type
    return exc


class LeaseLost(ForagerError):
    """The monitor's lease is no longer this process's: stop without writing."""

    def __init__(self, message: str = "the monitor's lease is no longer this process's") -> None:
        super().__init__(message)


class MonitorLoop:
    """Runs one monitor until stopped, its lease is lost, or it is paused or deleted."""

    def __init__(self, runner: MonitorRunner, monitor: Monitor) -> None:
        self.runner = runner
        self.db, self.settings = runner.db, runner.settings
        self.id = monitor.id
        self.url = monitor.url
        self.fetcher = monitor.fetcher
        self.parser_name = monitor.parser_name
        self.selector_type = monitor.selector_type
        self.selectors = monitor.selectors
        self.low, self.high = monitor.min_interval_seconds, monitor.max_interval_seconds
        self.interval = monitor.current_interval_seconds or monitor.interval_seconds
        self.digest = monitor.content_hash
        self.breaker_state = monitor.breaker_state
        self.breaker_opened_at = monitor.breaker_opened_at
        self.last_success = monitor.last_success_at
        self.unresolved = monitor.consecutive_errors > 0
        self.context = self._context(None)
        # A browser monitor has a Chromium of its own: its memory is measured alone, and a
        # restart (or the hard limit) closes it without touching any other fetch.
        self.browser: Fetcher | None = None
        self.browser_marker: str | None = None
        self._stopping = asyncio.Event()
        self._last_sample: datetime | None = None
        self.restarted = False  # since the last success
        self.last_latency_ms: int | None = monitor.last_latency_ms
        self.average_ms: float | None = None  # of successful polls, for the adaptive timeout
        stored = monitor.latency_buckets or []
        self.buckets = (
            list(stored)
            if len(stored) == len(LATENCY_BUCKETS) + 1
            else [0] * (len(LATENCY_BUCKETS) + 1)
        )
        self.latency_sum_ms = monitor.latency_sum_ms or 0
        self.windows = PollWindows.load(monitor.poll_windows)
        self.timeout = runner.settings.monitor_page_timeout_seconds
        self.state_field = monitor.state_field
        self.end_states = set(monitor.end_states or ())
        self.state = monitor.last_state
        # Set while the domain's policy holds it back (``monitors.policy``): the wait until
        # it asks again, instead of its interval.
        self.held: float | None = None

    def _context(self, previous: ScraperContext | None) -> ScraperContext:
        # A new run starts fresh (seed: scraper_id, start_time, its own staleness and error
        # count), so a page that stays down restarts its run once per staleness period, not
        # every cycle; the monitor's health keeps reading the row's last success.
        return ScraperContext(self.id, self.url, self.settings, polling_interval=self.interval)

    def stop(self) -> None:
        self._stopping.set()

    @property
    def owner(self) -> str:
        return self.runner.owner

    async def run(self) -> None:
        try:
            await self._begin(restart=False)
            while not self._stopping.is_set():
                now = utcnow()
                self._measure()
                if self.context.over_hard_limit() and self.browser is not None:
                    log.error(
                        "monitor %d: its Chromium uses %d MB, over the hard limit: killed",
                        self.id,
                        self.context.memory_bytes // (1024 * 1024),
                    )
                    await self._close_browser()
                    await self._restart("memory_hard")
                elif self.held is None:  # a held monitor is not stale: it waits on purpose
                    reason = self.context.restart_reason(now)
                    if reason is not None:
                        await self._restart(reason)
                await self._cycle()
                await self._maybe_sample()
                await self._sleep(self.interval if self.held is None else self.held)
            await self._sample("stop")
            log.info("monitor %d: run %s stopped", self.id, self.context.scraper_id)
        except LeaseLost:
            log.info("monitor %d: no longer leased by this process; stopped", self.id)
        finally:
            await self._close_browser()

    def _measure(self) -> None:
        """The run's own Chromium tree for a browser monitor, else this process's tree."""
        if self.browser_marker is None:
            self.context.measure()
            return
        from forager.fetch.browser import browser_processes  # Playwright only when used

        rss, cpu = 0, 0.0
        for proc in browser_processes(self.browser_marker):
            with contextlib.suppress(psutil.Error):
                rss += proc.memory_info().rss
                cpu += proc.cpu_percent(None)
        self.context.memory_bytes, self.context.cpu_percent = rss, cpu

    def _fetcher(self) -> Fetcher:
        if self.fetcher != "browser":
            return self.runner.fetchers
        if self.browser is None:
            from forager.fetch.browser import BrowserFetcher  # Playwright only when used

            self.browser_marker = f"m{self.id}-{uuid.uuid4().hex[:8]}"
            self.browser = BrowserFetcher(self.settings, private_marker=self.browser_marker)
        return self.browser

    async def _close_browser(self) -> None:
        browser, self.browser = self.browser, None
        self.browser_marker = None
        if browser is not None:
            with contextlib.suppress(Exception):
                await browser.aclose()

    async def _begin(self, restart: bool) -> None:
        ok = await writes.start_run(
            self.db, self.owner, self.id, self.context.scraper_id, self.context.start_time, restart
        )
        if not ok:
            raise LeaseLost
        await self._sample("restart" if restart else "start")

    async def _restart(self, reason: str) -> None:
        """Seed: restart on lifetime, staleness, errors or memory; counters stay on the row."""
        log.warning("monitor %d: restarting run %s (%s)", self.id, self.context.scraper_id, reason)
        await self._sample("restart")
        await self._close_browser()  # a browser monitor's next run starts a fresh Chromium
        self.context = self._context(self.context)
        self.restarted = True
        await self._begin(restart=True)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _breaker_allows(self, now: datetime) -> bool:
        state = breakers.effective_state(
            self.breaker_state, self.breaker_opened_at, self.settings, now
        )
        return state != breakers.OPEN

    async def _turn(self) -> Turn | Hold:
        """What the domain's policy says about polling now (no policy: go, as Forager)."""
        policy = self.runner.policy
        if policy is None:
            return Turn(FetchRequest(self.url, self.settings.user_agent, fetcher=self.fetcher))
        return await policy.turn(self.id, self.url, self.fetcher)

    async def _hold(self, hold: Hold) -> None:
        wait = MonitorPolicy.wait_of(hold, self.interval)
        if self.held is None:
            log.info("monitor %d: held back (%s)", self.id, hold.reason)
        self.held = wait
        if not await writes.record_hold(self.db, self.owner, self.id, hold.reason, wait):
            raise LeaseLost

    async def _poll(self, turn: Turn) -> tuple[dict[str, Any], int]:
        policy = self.runner.policy
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._fetcher().fetch(turn.request)
        except Exception as exc:
            if policy is not None:
                await policy.failed(turn, exc)
            raise
        if policy is not None:
            await policy.succeeded(turn, response.elapsed_ms)
        # Read in a parse process under its budget (FORAGER_PARSE_TIMEOUT_SECONDS), like a
        # task's page: a page that makes the parser spin fails this poll ``parse`` and costs
        # that process (killed and replaced), never this event loop or a thread of it.
        job = ParseJob(
            response.url,
            self.parser_name or "",
            response.body,
            response.headers.get("content-type", ""),
            response.status_code,
            monitor=(self.selector_type, self.selectors),
        )
        parsed = await self.runner.parser.parse(job)
        if parsed.error is not None:
            raise _failure(*parsed.error)
        assert parsed.data is not None  # a monitor's job answers data or an error
        return parsed.data, response.elapsed_ms

    async def _cycle(self) -> None:
        """One poll with up to ``monitor_retry_max_attempts`` retries behind the breaker."""
        attempt = 0
        opened_during = False
        while True:
            now = utcnow()
            if not self._breaker_allows(now):
                assert self.breaker_opened_at is not None
                reopens = (
                    self.breaker_opened_at.timestamp()
                    + self.settings.breaker_open_seconds
                    - now.timestamp()
                )
                self.interval = min(self.high, max(self.low, reopens))
                if not await writes.record_rejection(self.db, self.owner, self.id, self.interval):
                    raise LeaseLost
                return
            turn = await self._turn()
            if isinstance(turn, Hold):
                await self._hold(turn)
                return
            self.held = None
            try:
                data, latency_ms = await self._poll(turn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, TimeoutError):
                    self.timeout = min(self.settings.monitor_page_timeout_seconds, self.timeout * 2)
                self.context.record_error()
                self.interval = next_interval(self.interval, "failed", self.low, self.high)
                now = utcnow()
                before = self.breaker_state
                written = await writes.record_failure(
                    self.db,
                    self.settings,
                    owner=self.owner,
                    monitor_id=self.id,
                    scraper_id=self.context.scraper_id,
                    url=self.url,
                    fetcher=self.fetcher,
                    now=now,
                    exc=exc,
                    attempt=attempt,
                    interval=self.interval,
                    health=self._health(now),
                    breaker_before=before,
                )
                if written is None:
                    raise LeaseLost from None
                self._breaker(written)
                self.unresolved = True
                opened_during |= written.breaker_state == breakers.OPEN
                log.warning("monitor %d: poll failed (attempt %d): %s", self.id, attempt + 1, exc)
                if (
                    attempt >= self.settings.monitor_retry_max_attempts
                    or self._stopping.is_set()
                    or written.breaker_state == breakers.OPEN
                ):
                    return
                await self._sleep(retry_delay(attempt, self.settings))
                attempt += 1
                continue
            await self._succeed(data, latency_ms, attempt, opened_during)
            return

    async def _succeed(
        self, data: dict[str, Any], latency_ms: int, attempt: int, opened_during: bool
    ) -> None:
        now = utcnow()
        self.last_latency_ms = latency_ms
        self.buckets[bucket_of(latency_ms)] += 1
        self.latency_sum_ms += latency_ms
        self.windows.record(now, latency_ms)
        self.average_ms = (
            latency_ms
            if self.average_ms is None
            else (1 - LATENCY_WEIGHT) * self.average_ms + LATENCY_WEIGHT * latency_ms
        )
        self.timeout = poll_timeout(self.average_ms, self.settings)
        digest = content_hash(data)
        changed = digest != self.digest
        self.context.record_success(now)
        self.last_success = now
        self.interval = next_interval(
            self.interval, "changed" if changed else "unchanged", self.low, self.high
        )
        self.context.polling_interval = self.interval
        state: tuple[str | None, str | None] | None = None
        if self.state_field is not None:
            value = data.get(self.state_field)
            now_state = None if value is None else str(value)[:200]
            if now_state != self.state:
                state = (self.state, now_state)
        ended = state is not None and state[1] in self.end_states
        resolution = None
        if self.unresolved:
            if opened_during or self.breaker_state != breakers.CLOSED:
                resolution = "circuit_breaker"
            elif self.restarted:
                resolution = "restart"
            else:
                resolution = "auto_retry"
        queue = self.runner.results
        if changed:
            queue.put(
                PendingSnapshot.of(self.id, data, digest, now, self.context.scraper_id, latency_ms)
            )
        try:
            written = await self._record_success(
                now, queue, digest, latency_ms, resolution, state, ended
            )
        except (SQLAlchemyError, OSError, TimeoutError) as exc:
            # The change waits in the bounded queue for the next write of any monitor; this
            # poll's counters are lost, the loop goes on (seed: no write may stop the scraper).
            log.warning(
                "monitor %d: writing its poll failed (%s); %d snapshots queued",
                self.id,
                type(exc).__name__,
                len(queue),
            )
            self.digest = digest
            return
        if written is None:
            raise LeaseLost
        if state is not None:
            self.state = state[1]
            log.info("monitor %d: state %s → %s", self.id, state[0], state[1])
        if ended:
            log.info("monitor %d: reached its end state %r; stopped", self.id, self.state)
            self.stop()
        self._breaker(written)
        self.digest = digest
        self.unresolved = self.restarted = False

    async def _record_success(
        self,
        now: datetime,
        queue: SnapshotQueue,
        digest: str,
        latency_ms: int,
        resolution: str | None,
        state: tuple[str | None, str | None] | None,
        ended: bool,
    ) -> writes.Written | None:
        return await writes.record_success(
            self.db,
            self.settings,
            owner=self.owner,
            monitor_id=self.id,
            now=now,
            queue=queue,
            digest=digest,
            latency_ms=latency_ms,
            interval=self.interval,
            health=self._health(now),
            memory_bytes=self.context.memory_bytes,
            cpu_percent=self.context.cpu_percent,
            breaker_before=self.breaker_state,
            resolution=resolution,
            state=state,
            ended=ended,
            latency_buckets=list(self.buckets),
            latency_sum_ms=self.latency_sum_ms,
            poll_windows=self.windows.dump(),
        )

    def _breaker(self, written: writes.Written) -> None:
        self.breaker_state, self.breaker_opened_at = (
            written.breaker_state,
            written.breaker_opened_at,
        )

    def _health(self, now: datetime) -> str:
        return health_of(
            self.context.error_count, self.last_success, self.context.start_time, now, self.settings
        )

    async def _maybe_sample(self) -> None:
        now = utcnow()
        if (
            self._last_sample is None
            or (now - self._last_sample).total_seconds() >= self.settings.monitor_health_log_seconds
        ):
            await self._sample("sample")

    async def _sample(self, event: str) -> None:
        now = utcnow()
        self._last_sample = now
        ctx = self.context
        since = self.last_success
        try:
            await writes.log_health(
                self.db,
                {
                    "scraper_id": ctx.scraper_id,
                    "monitor_id": self.id,
                    "timestamp": now,
                    "health_status": self._health(now),
                    "error_count": ctx.error_count,
                    "memory_mb": round(ctx.memory_bytes / 1024 / 1024, 2),
                    "cpu_percent": round(ctx.cpu_percent, 2),
                    "update_latency_ms": self.last_latency_ms,
                    "polling_interval_seconds": self.interval,
                    "uptime_seconds": int((now - ctx.start_time).total_seconds()),
                    "last_update_age_seconds": (
                        int((now - since).total_seconds()) if since is not None else None
                    ),
                    "event": event,
                },
            )
        except Exception:
            log.exception("monitor %d: writing its health sample failed", self.id)


class MonitorRunner:
    """Leases monitors and runs up to ``slots`` of them in this process until ``stop()``;
    their pages are fetched by ``fetchers`` and read by ``parser``, the process's own, under
    their domain's policy (``box`` given: ``monitors.policy``)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        fetchers: Fetcher,
        parser: ParsePool,
        *,
        owner: str,
        slots: int | None = None,
        box: SecretBox | None = None,
    ) -> None:
        self.db, self.settings, self.fetchers, self.parser = db, settings, fetchers, parser
        self.owner = owner
        # The domains' policy over every poll (``monitors.policy``); it needs the secret box
        # (request profiles, proxy credentials): a runner made without one polls without it.
        self.policy = MonitorPolicy(db, settings, box, fetchers, owner) if box is not None else None
        self.slots = settings.monitor_slots if slots is None else slots
        self.loops: dict[int, tuple[MonitorLoop, asyncio.Task[None]]] = {}
        # Snapshots waiting to be written, bounded (seed MAX_QUEUE_SIZE / MAX_QUEUE_SIZE_MB).
        self.results = SnapshotQueue(
            settings.monitor_max_queue_size,
            int(settings.monitor_max_queue_size_mb * 1024 * 1024),
        )
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._cleaned: float | None = None

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        """A monitor was created or resumed: look for work now."""
        self._wake.set()

    @property
    def running(self) -> list[int]:
        return sorted(self.loops)

    async def run(self) -> None:
        log.info("monitor runner %s started (%d slots)", self.owner, self.slots)
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                try:
                    await self.tick()
                except Exception:
                    log.exception(
                        "monitor leases failed; retrying in %.1f s",
                        self.settings.monitor_claim_seconds,
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.settings.monitor_claim_seconds)
        finally:
            await self._shutdown()

    async def tick(self) -> None:
        """Forget finished loops, renew held leases (stopping lost ones), claim free ones."""
        for monitor_id, (_, task) in list(self.loops.items()):
            if task.done():
                del self.loops[monitor_id]
                if not task.cancelled() and task.exception() is not None:
                    log.error(
                        "monitor %d: its loop failed; giving it back",
                        monitor_id,
                        exc_info=task.exception(),
                    )
                with contextlib.suppress(Exception):
                    await writes.release(self.db, self.owner, monitor_id)
        held = set(self.loops)
        kept = await writes.renew(self.db, self.owner, held, self.settings)
        for monitor_id in held - kept:
            loop, task = self.loops.pop(monitor_id)
            log.info("monitor %d: paused, deleted or taken over; stopping it here", monitor_id)
            loop.stop()
            task.cancel()  # it no longer owns the lease: nothing of its cycle may be written
        await self._flush()
        if self._stopping.is_set():
            return
        if self._cleaned is None or time.monotonic() - self._cleaned >= CLEANUP_SECONDS:
            self._cleaned = time.monotonic()
            samples, errors = await admin.clean_logs(self.db, self.settings)
            if samples or errors:
                log.info("deleted %d old health samples and %d old errors", samples, errors)
        for monitor in await writes.claim(
            self.db, self.owner, self.settings, self.slots - len(self.loops)
        ):
            loop = MonitorLoop(self, monitor)
            task = asyncio.create_task(loop.run(), name=f"monitor-{monitor.id}")
            self.loops[monitor.id] = (loop, task)
            log.info("monitor %d: claimed by %s", monitor.id, self.owner)

    async def _flush(self) -> None:
        """Write snapshots still queued after a failed write (normally none wait)."""
        if not len(self.results) and not self.results.unrecorded_drops:
            return
        try:
            written = await writes.flush(self.db, self.results)
            log.info("wrote %d queued snapshots", written)
        except Exception as exc:
            log.warning(
                "writing %d queued snapshots failed (%s); they wait",
                len(self.results),
                type(exc).__name__,
            )

    async def _shutdown(self) -> None:
        """Seed's graceful flow: finish each cycle, save state, give the leases back."""
        if not self.loops:
            return
        for loop, _ in self.loops.values():
            loop.stop()
        tasks = {task: monitor_id for monitor_id, (_, task) in self.loops.items()}
        _, late = await asyncio.wait(tasks, timeout=self.settings.shutdown_seconds)
        for task in late:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._flush()  # seed: flush, then save state
        for monitor_id in tasks.values():
            with contextlib.suppress(Exception):
                await writes.release(self.db, self.owner, monitor_id)
        log.info("monitor runner %s stopped (%d monitors released)", self.owner, len(tasks))
        self.loops.clear()
