"""Which agent connections are alive: no heartbeat for ``FORAGER_AGENT_TIMEOUT_SECONDS`` or a
revoked (or rotated) token drops a connection; agents another, dead, server process held are
marked disconnected.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from forager.agents import presence, protocol
from forager.agents.connection import Connection
from forager.config import Settings
from forager.db.engine import Database

log = logging.getLogger(__name__)

Drop = Callable[[Connection, str, int], Awaitable[None]]


class Liveness:
    """Sweeps ``connections`` every half heartbeat interval (at most a second)."""

    def __init__(
        self, db: Database, settings: Settings, connections: dict[int, Connection], drop: Drop
    ) -> None:
        self.db = db
        self.settings = settings
        self.connections = connections
        self.drop = drop

    async def run(self) -> None:
        every = min(1.0, self.settings.agent_heartbeat_interval / 2)
        while True:
            await asyncio.sleep(every)
            try:
                await self.sweep()
            except Exception:
                log.exception("agent sweep failed; retrying in %.1f s", every)

    async def sweep(self) -> None:
        timeout = self.settings.agent_timeout_seconds
        now = time.monotonic()
        for conn in list(self.connections.values()):
            if now - conn.last_heartbeat > timeout:
                log.warning("agent %s: no heartbeat for %.0f s", conn.name, timeout)
                await self.drop(conn, "heartbeat timeout", protocol.CLOSE_TIMEOUT)
        tokens = {c.agent_id: c.token_hash for c in self.connections.values()}
        valid = await presence.still_valid(self.db, tokens)
        for agent_id in set(tokens) - valid:
            revoked = self.connections.get(agent_id)
            if revoked is not None:
                await self.drop(revoked, "authentication failed", protocol.CLOSE_UNAUTHORIZED)
        # Agents another (dead) server process held: their heartbeats stopped long ago.
        await presence.sweep_silent(self.db, timeout, set(self.connections))
