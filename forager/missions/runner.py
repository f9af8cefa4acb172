"""Runs the orchestrator where the lease is: in every ``forager serve`` and in
``forager orchestrate``, at most one of them leads at a time.

Each runner stands by, reading the control row every third of a lease. When a run is
requested and it takes the lease, it leads: recovery, then the loop, renewing the lease every
third of its length. A leader that cannot renew (it was paused or cut off past its lease) stops
at once; whoever took the lease over recovers. Every move being a compare-and-set, two loops
overlapping for a moment cannot claim one mission twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.missions import control
from forager.missions.clients import http_client
from forager.missions.context import Env
from forager.missions.orchestrator import FINISHED, Orchestrator

log = logging.getLogger(__name__)


def new_leader_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:orchestrator:{secrets.token_hex(3)}"


class MissionRunner:
    """Stands by, and leads the orchestrator loop whenever it holds the lease."""

    def __init__(self, db: Database, settings: Settings, box: SecretBox) -> None:
        self.db = db
        self.settings = settings
        self.box = box  # the composition root's (``Runtime.mission_runner``)
        self.owner = new_leader_id()
        self.current: Orchestrator | None = None
        self.runs = 0
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()

    @property
    def every(self) -> float:
        return self.settings.mission_leader_lease_seconds / 3

    def wake(self) -> None:
        """A run was requested or work was queued: look now, not at the next poll."""
        self._wake.set()
        if self.current is not None:
            self.current.wake()

    def stop(self) -> None:
        """Stop standing by; a run in progress stops (its missions wait for the next one)."""
        self._stopping.set()
        self._wake.set()
        if self.current is not None:
            self.current.stop()

    async def run(self, *, until_idle: bool = False) -> None:
        """Until ``stop()``; with ``until_idle``, also once no run is requested any more."""
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                view = await control.read(self.db)
                if view.run_requested and await control.acquire(
                    self.db, self.owner, self.settings.mission_leader_lease_seconds
                ):
                    await self._lead(view.run_generation)
                    continue
                if until_idle and not view.run_requested:
                    return
            except Exception:
                log.exception("mission runner: cannot read or take the lease")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.every)

    async def _lead(self, generation: int) -> None:
        async with http_client(self.settings.mission_http_timeout_seconds) as http:
            orchestrator = Orchestrator(Env(self.db, self.settings, self.box, http), generation)
            self.current = orchestrator
            self.runs += 1
            renewing = asyncio.create_task(self._renew(orchestrator), name="mission-lease")
            log.info("orchestrator %s leads run %d", self.owner, generation)
            try:
                outcome = await orchestrator.run()
                if outcome == FINISHED:
                    await control.finish_run(self.db, self.owner, generation)
                log.info("orchestrator run %d %s", generation, outcome)
            finally:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing
                self.current = None
                with contextlib.suppress(Exception):
                    await control.release(self.db, self.owner)

    async def _renew(self, orchestrator: Orchestrator) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                held = await control.acquire(
                    self.db, self.owner, self.settings.mission_leader_lease_seconds
                )
            except Exception:
                log.exception("mission runner: cannot renew the lease")
                held = False
            if not held:
                log.warning("orchestrator %s lost its lease: stopping", self.owner)
                orchestrator.abort()
                return
