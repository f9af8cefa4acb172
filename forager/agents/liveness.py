"""Which agent connections are alive: no heartbeat for ``FORAGER_AGENT_TIMEOUT_SECONDS`` or a
revoked (or rotated) token drops a connection; a task held past its deadline fails as a
timeout; agents another, dead, server process held are marked disconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from forager.agents import presence, protocol
from forager.agents.connection import RETURN_WINDOW_SECONDS, Assigned, Connection
from forager.config import Settings
from forager.db.engine import Database
from forager.db.types import utcnow
from forager.errors import FetchError, FetchTimeout
from forager.fetch.base import FetchResponse

log = logging.getLogger(__name__)

Drop = Callable[[Connection, str, int], Awaitable[None]]
Settle = Callable[[Connection, Assigned, FetchResponse | FetchError], None]


class Liveness:
    """Sweeps ``connections`` every half heartbeat interval (at most a second)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        connections: dict[int, Connection],
        drop: Drop,
        settle: Settle,
    ) -> None:
        self.db = db
        self.settings = settings
        self.connections = connections
        self.drop = drop
        self.settle = settle

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep until ``stop`` is set (between sweeps, never inside one's transaction)."""
        every = min(1.0, self.settings.agent_heartbeat_interval / 2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
                return
            try:
                await self.sweep()
            except Exception:
                log.exception("agent sweep failed; retrying in %.1f s", every)

    @property
    def task_deadline_seconds(self) -> float:
        """How long an agent may hold one task without finishing it, heartbeats or not: its
        fetch time twice over (the fetch, then the upload) plus a heartbeat timeout."""
        return 2 * self.settings.fetch_timeout_seconds + self.settings.agent_timeout_seconds

    async def sweep(self) -> None:
        timeout = self.settings.agent_timeout_seconds
        now = time.monotonic()
        for conn in list(self.connections.values()):
            if now - conn.last_heartbeat > timeout:
                log.warning("agent %s: no heartbeat for %.0f s", conn.name, timeout)
                await self.drop(conn, "heartbeat timeout", protocol.CLOSE_TIMEOUT)
            else:
                self._expire_overdue(conn)
        tokens = {c.agent_id: c.token_hash for c in self.connections.values()}
        valid = await presence.still_valid(self.db, tokens)
        for agent_id in set(tokens) - valid:
            revoked = self.connections.get(agent_id)
            if revoked is not None:
                await self.drop(revoked, "authentication failed", protocol.CLOSE_UNAUTHORIZED)
        # Agents another (dead) server process held: their heartbeats stopped long ago.
        await presence.sweep_silent(self.db, timeout, set(self.connections))

    def _expire_overdue(self, conn: Connection) -> None:
        """Fail (as a timeout, retried like any) each task the agent has held past the
        deadline: heartbeats keep its leases alive, so without this a silent agent could hold
        domains' concurrency slots for good."""
        deadline = self.task_deadline_seconds
        now = utcnow()
        for assigned in list(conn.in_flight.values()):
            if assigned.settling or (now - assigned.started).total_seconds() <= deadline:
                continue
            conn.ignore(assigned.task.id)
            assigned.body = None
            # Hoarding costs the tasks a retry each: it gets no new work for a while.
            conn.quiet_until = time.monotonic() + RETURN_WINDOW_SECONDS
            log.warning(
                "agent %s held task %s for over %.0f s: failed as a timeout",
                conn.name,
                assigned.task.id,
                deadline,
            )
            self.settle(
                conn,
                assigned,
                FetchTimeout(f"the agent did not return the page within {deadline:.0f} s"),
            )
