"""The bounded in-memory queue of snapshots waiting to be written (seed ``MAX_QUEUE_SIZE`` /
``MAX_QUEUE_SIZE_MB``), one per process running monitors.

A changed value is queued, then written with its poll's outcome in one transaction together
with anything still waiting (``store.record_success``). When that write fails (the database
is down or busy) the batch goes back to the front of the queue and waits for the next write
of any monitor; past either bound the *oldest* unwritten snapshots are dropped and counted
per monitor (``monitors.dropped_snapshots``, shown by ``/health`` and ``/metrics``) — never
the latest, which is what a reader of the monitor wants.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PendingSnapshot:
    """One observed change, as the ``monitor_snapshots`` row it becomes."""

    monitor_id: int
    data: dict[str, Any]
    content_hash: str
    observed_at: datetime
    scraper_id: str
    update_latency_ms: int
    size: int

    @classmethod
    def of(
        cls,
        monitor_id: int,
        data: dict[str, Any],
        digest: str,
        observed_at: datetime,
        scraper_id: str,
        latency_ms: int,
    ) -> PendingSnapshot:
        size = len(json.dumps(data, default=str, separators=(",", ":")))
        return cls(monitor_id, data, digest, observed_at, scraper_id, latency_ms, size)

    def row(self) -> dict[str, Any]:
        return {
            "monitor_id": self.monitor_id,
            "data": self.data,
            "content_hash": self.content_hash,
            "observed_at": self.observed_at,
            "scraper_id": self.scraper_id,
            "update_latency_ms": self.update_latency_ms,
            "data_source": "scraper",
        }


class SnapshotQueue:
    """Snapshots not yet written, oldest first, within ``max_items`` and ``max_bytes``."""

    def __init__(self, max_items: int, max_bytes: int) -> None:
        self.max_items, self.max_bytes = max_items, max_bytes
        self._items: deque[PendingSnapshot] = deque()
        self._bytes = 0
        # Drops not yet added to the monitors' counters (written with the next batch).
        self.unrecorded_drops: Counter[int] = Counter()
        self.dropped = 0  # in this process, since it started

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes

    def put(self, snapshot: PendingSnapshot) -> None:
        self._items.append(snapshot)
        self._bytes += snapshot.size
        self._trim()

    def take(self) -> list[PendingSnapshot]:
        """Everything waiting, to be written now (``give_back`` when the write fails)."""
        items = list(self._items)
        self._items.clear()
        self._bytes = 0
        return items

    def give_back(self, items: Iterable[PendingSnapshot]) -> None:
        """A failed write's batch returns to the front, ahead of what came meanwhile."""
        back = list(items)
        self._items.extendleft(reversed(back))
        self._bytes += sum(s.size for s in back)
        self._trim()

    def take_drops(self) -> Counter[int]:
        drops, self.unrecorded_drops = self.unrecorded_drops, Counter()
        return drops

    def give_back_drops(self, drops: Counter[int]) -> None:
        self.unrecorded_drops.update(drops)

    def _trim(self) -> None:
        while len(self._items) > 1 and (
            len(self._items) > self.max_items or self._bytes > self.max_bytes
        ):
            old = self._items.popleft()
            self._bytes -= old.size
            self.unrecorded_drops[old.monitor_id] += 1
            self.dropped += 1
            log.warning(
                "monitor %d: result queue full; its unwritten snapshot of %s dropped",
                old.monitor_id,
                old.observed_at.isoformat(),
            )
