"""One dedicated PostgreSQL connection that ``LISTEN``s on a channel (procrastinate's pattern).

``Listener.run`` holds an asyncpg connection of its own (not one of the pool's: it stays open
for the process's life), calls ``on_notify`` for every notification, and reconnects with
backoff when the connection drops — a warning once per outage, not per try. Whoever listens
still polls: a notification sent while the connection was down is missed, so ``on_notify`` is
also called once each time listening (re)starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from forager.db.engine import database_label

log = logging.getLogger(__name__)
FIRST_RETRY_SECONDS = 0.1
MAX_RETRY_SECONDS = 5.0
_CONNECT_TIMEOUT_SECONDS = 10.0


def asyncpg_dsn(url: str) -> str:
    """The libpq-style DSN asyncpg takes for a ``postgresql+asyncpg://`` URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Listener:
    """Calls ``on_notify`` whenever ``NOTIFY channel`` is committed in the database at ``url``."""

    def __init__(self, url: str, channel: str, on_notify: Callable[[], None]) -> None:
        self._dsn = asyncpg_dsn(url)
        self._where = database_label(url)
        self.channel = channel
        self.on_notify = on_notify

    def _heard(self, *_: object) -> None:
        self.on_notify()

    async def run(self, stopping: asyncio.Event) -> None:
        """Listen until ``stopping`` is set, reconnecting whenever the connection drops."""
        delay = FIRST_RETRY_SECONDS
        outage = False
        while not stopping.is_set():
            dropped = asyncio.Event()
            try:
                conn = await self._connect(dropped)
            except Exception as exc:  # refused, timed out, dropped while starting
                if not outage:
                    log.warning(
                        "listening for %s on %s failed (%s); polling meanwhile, retrying",
                        self.channel,
                        self._where,
                        exc,
                    )
                    outage = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)
                continue
            if outage:
                log.info("listening for %s on %s again", self.channel, self._where)
                outage = False
            delay = FIRST_RETRY_SECONDS
            self.on_notify()  # whatever was announced while nobody listened
            try:
                await _first(stopping.wait(), dropped.wait())
            finally:
                if not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=_CONNECT_TIMEOUT_SECONDS)
            if dropped.is_set() and not stopping.is_set():
                log.warning(
                    "the connection listening for %s on %s dropped; polling meanwhile, "
                    "reconnecting",
                    self.channel,
                    self._where,
                )
                outage = True

    async def _connect(self, dropped: asyncio.Event) -> asyncpg.Connection:
        """A new connection listening on the channel; ``dropped`` is set when it is lost."""
        conn = await asyncpg.connect(self._dsn, timeout=_CONNECT_TIMEOUT_SECONDS)
        try:
            conn.add_termination_listener(lambda _conn: dropped.set())
            await conn.add_listener(self.channel, self._heard)
        except BaseException:
            conn.terminate()
            raise
        return conn


async def _first(*waits: Coroutine[Any, Any, object]) -> None:
    """Return as soon as one of ``waits`` is done; cancel the others."""
    tasks = [asyncio.create_task(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
