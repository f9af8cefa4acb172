"""``forager celery-worker``: a Celery worker whose messages run on a ``WorkerPool``.

The pool lives in an event loop of its own thread, exactly as in ``forager worker`` (same
pipeline, writer, heartbeats, graceful drain); only its claim loop is idle, since the relay
claims. Celery's threads take messages one at a time each (prefetch 1), hand the task id to the
pool (``WorkerPool.run_delivered``: a compare-and-set takes the task) and ack once it ran.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from forager.broker.app import RUN_TASK, celery_app, queue_name
from forager.config import Settings
from forager.queue.door import QUEUES
from forager.worker.pool import WorkerPool

log = logging.getLogger(__name__)
_START_SECONDS = 120.0  # opening the runtime (migrations, parse processes) may take a while

OpenPool = Callable[[], AbstractAsyncContextManager[WorkerPool]]


class CeleryWorker:
    """Runs until Celery's warm shutdown (SIGTERM, SIGINT), then drains the pool."""

    def __init__(
        self,
        settings: Settings,
        open_pool: OpenPool,
        *,
        concurrency: int,
        queues: list[str] | None = None,
    ) -> None:
        self.settings = settings
        self.open_pool = open_pool
        self.concurrency = concurrency
        self.queues = queues or list(QUEUES)
        self.loop = asyncio.new_event_loop()
        self.pool: WorkerPool | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    def run(self) -> None:
        thread = threading.Thread(target=self._loop_main, name="forager pool", daemon=True)
        thread.start()
        if not self._ready.wait(_START_SECONDS) or self.pool is None:
            raise RuntimeError(f"the worker pool did not start: {self._failure!r}")
        try:
            self._celery_worker().start()  # blocks until a warm shutdown
        finally:
            pool = self.pool
            self.loop.call_soon_threadsafe(pool.stop)
            thread.join(self.settings.shutdown_seconds + 30)

    def _loop_main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._failure = exc
            log.exception("the worker pool stopped")
        finally:
            self._ready.set()
            self.loop.close()

    async def _serve(self) -> None:
        async with self.open_pool() as pool:
            self.pool = pool
            self._ready.set()
            await pool.run()

    def _run(self, task_id: int, owner: str) -> str | None:
        """One message: run its task on the pool and wait (the ack follows)."""
        if self.pool is None:
            raise RuntimeError("the worker pool is not running")
        done = asyncio.run_coroutine_threadsafe(self.pool.run_delivered(task_id, owner), self.loop)
        return done.result()

    def _celery_worker(self) -> Any:
        app = celery_app(self.settings)
        app.task(name=RUN_TASK, acks_late=True, ignore_result=True)(self._run)
        name = f"forager.{os.getpid()}@{socket.gethostname()}"
        return app.Worker(
            hostname=name,
            pool="threads",
            concurrency=self.concurrency,
            queues=[queue_name(self.settings, q) for q in self.queues],
            without_gossip=True,
            without_mingle=True,
            without_heartbeat=True,
            quiet=True,
            loglevel=self.settings.log_level.upper(),
        )
