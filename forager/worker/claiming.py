"""The one claim loop: claim while there is room, hand each task out, then wait for a wake-up,
the poll interval or (when a claim found nothing) the hint of ``nothing_due``.

The worker pool runs one, handing tasks to its pipeline jobs; the agent hub runs one per
connection, handing tasks to the agent (so a slow claim for one agent never holds up the
others). What differs between them is passed in: how much room there is, whether to claim
now, how to claim and hand out, and what to do when nothing was due.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from forager.config import Settings
from forager.queue.door import ClaimedTask

log = logging.getLogger(__name__)


def _any_room(free: int) -> bool:
    return free > 0


class ClaimLoop:
    """Runs until ``stop()``; ``wake()`` makes it look now instead of at the next poll."""

    def __init__(
        self,
        settings: Settings,
        name: str,
        *,
        room: Callable[[], int],
        claim: Callable[[int], Awaitable[list[ClaimedTask]]],
        hand_out: Callable[[ClaimedTask], Awaitable[object]],
        may_claim: Callable[[int], bool] = _any_room,
        nothing_due: Callable[[], Awaitable[float | None]] | None = None,
        then_claim: Callable[[int], Awaitable[list[ClaimedTask]]] | None = None,
    ) -> None:
        self.settings = settings
        self.name = name
        self.room = room
        self.claim = claim
        self.hand_out = hand_out
        self.may_claim = may_claim
        # Called after a claim found nothing; returns a shorter wait than the poll, if any.
        self.nothing_due = nothing_due
        # Claims the room ``claim`` left, once its tasks are handed out (the worker's parse
        # claim: a fetch it claimed starts first, not one transaction later).
        self.then_claim = then_claim
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def _claim(
        self, claim: Callable[[int], Awaitable[list[ClaimedTask]]], free: int
    ) -> list[ClaimedTask]:
        try:
            return await claim(free)
        except Exception:
            log.exception(
                "%s: claiming failed; retrying in %.1f s", self.name, self.settings.poll_seconds
            )
            return []

    async def _hand_out(self, claimed: list[ClaimedTask]) -> None:
        for task in claimed:
            try:
                await self.hand_out(task)
            except Exception:  # a database error: the lease expires and it is reaped
                log.exception("task %s: handing it out (%s) failed", task.id, self.name)

    async def run(self) -> None:
        poll = self.settings.poll_seconds
        while not self._stopping.is_set():
            self._wake.clear()
            free = self.room()
            claimed: list[ClaimedTask] = []
            tried = self.may_claim(free)
            if tried:
                claimed = await self._claim(self.claim, free)
                await self._hand_out(claimed)
                if self.then_claim is not None and len(claimed) < free:
                    more = await self._claim(self.then_claim, free - len(claimed))
                    await self._hand_out(more)
                    claimed += more
            if claimed and self.room() > 0:
                continue  # there may be more right away
            timeout = poll
            if tried and not claimed and self.nothing_due is not None:
                try:
                    hint = await self.nothing_due()
                except Exception:
                    hint = None
                if hint is not None:
                    timeout = min(timeout, max(0.0, hint))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
