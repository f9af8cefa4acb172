"""What a task's path shares within one process, built in one place (``Parts.build``).

The composition root (``forager.runtime.Runtime``) builds one ``Parts`` per process and hands
it to the worker pool, the agent hub and the routers: a new page-store backend is one line in
``build``, not one per caller. A pool built without one (tests, scripts) builds its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.listen import Listener
from forager.fetch.base import Fetcher
from forager.fetch.fetcher_set import FetcherSet
from forager.queue.door import NEW_WORK
from forager.store.backend import open_page_store
from forager.store.pages import PageStore
from forager.worker.parsing import ParsePool
from forager.worker.writer import GroupWriter


class WakeSignal:
    """ "New work may be claimable": whoever claims (worker pool, agent hub) listens."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []

    def listen(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def __call__(self) -> None:
        for listener in self._listeners:
            listener()


@dataclass
class Parts:
    """Page store, secret box, fetchers, parse processes, writer and wake-up signal, and on
    PostgreSQL the listener that raises the signal when another process announces new work."""

    settings: Settings
    pages: PageStore
    box: SecretBox
    fetchers: Fetcher
    parser: ParsePool
    writer: GroupWriter
    wake: WakeSignal = field(default_factory=WakeSignal)
    listener: Listener | None = None  # run by the worker pool (``WorkerPool.run``)

    @classmethod
    def build(cls, db: Database, settings: Settings) -> Parts:
        box = SecretBox(settings)
        wake = WakeSignal()
        listen = settings.listen_notify and not db.is_sqlite
        return cls(
            settings=settings,
            pages=open_page_store(settings),
            box=box,
            # One fetcher per kind (http, impersonate, browser), picked per task's domain.
            fetchers=FetcherSet(settings),
            parser=ParsePool(settings),
            writer=GroupWriter(db, settings, box),
            wake=wake,
            listener=Listener(db.url, NEW_WORK, wake) if listen else None,
        )

    async def aclose(self) -> None:
        """Write what is queued, then stop the parse processes and close the fetchers."""
        try:
            await self.writer.aclose()
        finally:
            await self.parser.aclose()
            await self.fetchers.aclose()
            await self.pages.aclose()
