"""The relay: claims due work into the outbox and publishes the outbox to RabbitMQ.

It runs as a side task of every worker pool that runs the scheduler (``serve``, ``forager
worker``) when ``FORAGER_DISPATCH=celery``, and on its own as ``forager relay``. Several relays
at once are safe: claims lock their domains (``SKIP LOCKED``) and so do outbox reads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket

from kombu.exceptions import OperationalError

from forager.broker.app import celery_app, publish
from forager.config import Settings
from forager.db.engine import Database
from forager.queue.door import OWNER_PREFIX, Message, TaskQueue

log = logging.getLogger(__name__)
# Rounds of claim + publish in one step while there is more to do.
_ROUNDS = 20


class Relay:
    """One relay: ``step()`` claims and publishes until nothing is left or the room is full."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.settings = settings
        self.queue = TaskQueue(db, settings)
        self.owner = f"{OWNER_PREFIX}{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.app = celery_app(settings)
        self.published = 0
        self._unreachable = False  # warned once per outage

    async def step(self) -> int:
        """Claim due work into the outbox, publish what is unsent; returns how many published."""
        total = 0
        try:
            for _ in range(_ROUNDS):
                claimed = await self.queue.claim_into_outbox(self.owner)
                sent = await self.queue.publish_outbox(self._send)
                total += sent
                if not claimed and not sent:
                    break
        except (OperationalError, OSError) as exc:  # the outbox keeps the rows for next time
            if not self._unreachable:
                log.warning("relay: cannot publish to RabbitMQ (%s); retrying until it can", exc)
            self._unreachable = True
        else:
            if self._unreachable:
                log.warning("relay: publishing to RabbitMQ again")
            self._unreachable = False
        self.published += total
        return total

    async def _send(self, messages: list[Message]) -> None:
        await asyncio.to_thread(publish, self.app, self.settings, messages)

    def close(self) -> None:
        """Close the broker connections (the producer pool)."""
        self.app.close()
