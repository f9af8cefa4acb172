"""Recent successful polls of a monitor, kept on its row for ``/health``'s performance block:
updates per minute and latency p95 over the last minute or two, from recorded polls (not the
monitors' current intervals).

Two consecutive ``WINDOW_SECONDS`` windows (the current one and the one before), each a
latency histogram (``LATENCY_BUCKETS``, then +Inf) and the sum of latencies. The monitor's
loop updates them in memory and writes them in the ``UPDATE`` its poll already makes (no
statement of their own); ``/health`` reads them with the monitor rows it already loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# Poll latency histogram buckets, in seconds (Prometheus' ladder, to the 30 s timeout).
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
WIDTH = len(LATENCY_BUCKETS) + 1
WINDOW_SECONDS = 60.0


def bucket_of(latency_ms: int) -> int:
    """Index of the first bucket holding ``latency_ms`` (the last one is +Inf)."""
    for index, bound in enumerate(LATENCY_BUCKETS):
        if latency_ms <= bound * 1000:
            return index
    return len(LATENCY_BUCKETS)


def _zeros() -> list[int]:
    return [0] * WIDTH


@dataclass
class PollWindows:
    """The current window (from ``start``) and the one before it."""

    start: datetime | None = None
    current: list[int] = field(default_factory=_zeros)
    current_ms: int = 0
    previous: list[int] = field(default_factory=_zeros)
    previous_ms: int = 0

    @classmethod
    def load(cls, doc: Any) -> PollWindows:
        """From the row's JSON; anything unreadable starts empty."""
        try:
            windows = cls(
                datetime.fromisoformat(doc["start"]),
                list(doc["current"]),
                int(doc["current_ms"]),
                list(doc["previous"]),
                int(doc["previous_ms"]),
            )
        except (TypeError, KeyError, ValueError):
            return cls()
        if len(windows.current) != WIDTH or len(windows.previous) != WIDTH:
            return cls()
        return windows

    def dump(self) -> dict[str, Any]:
        return {
            "start": self.start.isoformat() if self.start else None,
            "current": self.current,
            "current_ms": self.current_ms,
            "previous": self.previous,
            "previous_ms": self.previous_ms,
        }

    def roll(self, now: datetime) -> None:
        """Move on to the window holding ``now``; windows older than the previous are gone."""
        if self.start is None:
            self.start = now
            return
        width = timedelta(seconds=WINDOW_SECONDS)
        if now - self.start >= 2 * width:
            self.previous, self.previous_ms = _zeros(), 0
            self.current, self.current_ms = _zeros(), 0
            self.start = now
        elif now - self.start >= width:
            self.previous, self.previous_ms = self.current, self.current_ms
            self.current, self.current_ms = _zeros(), 0
            self.start += width

    def record(self, now: datetime, latency_ms: int) -> None:
        self.roll(now)
        self.current[bucket_of(latency_ms)] += 1
        self.current_ms += latency_ms

    def seconds(self, now: datetime) -> float:
        """The span the two windows cover at ``now`` (at least one second)."""
        if self.start is None:
            return WINDOW_SECONDS
        return max(1.0, WINDOW_SECONDS + (now - self.start).total_seconds())


@dataclass(frozen=True, slots=True)
class Recent:
    """Every monitor's recent polls together."""

    updates_per_minute: float
    average_latency_ms: float
    p95_latency_ms: float


def recent(docs: list[Any], now: datetime) -> Recent:
    """Updates per minute, average and p95 latency (interpolated in its histogram bucket, as
    Prometheus' ``histogram_quantile``) over the monitors' recorded windows at ``now``."""
    counts, total_ms, rate = _zeros(), 0, 0.0
    for doc in docs:
        windows = PollWindows.load(doc)
        if windows.start is None:
            continue
        windows.roll(now)
        merged = [a + b for a, b in zip(windows.current, windows.previous, strict=True)]
        counts = [a + b for a, b in zip(counts, merged, strict=True)]
        total_ms += windows.current_ms + windows.previous_ms
        rate += sum(merged) * 60 / windows.seconds(now)
    n = sum(counts)
    return Recent(
        updates_per_minute=round(rate, 1),
        average_latency_ms=round(total_ms / n, 1) if n else 0.0,
        p95_latency_ms=round(_quantile(0.95, counts), 1),
    )


def _quantile(q: float, counts: list[int]) -> float:
    n = sum(counts)
    if not n:
        return 0.0
    rank, seen = q * n, 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            low = 0.0 if index == 0 else LATENCY_BUCKETS[index - 1] * 1000
            if index == len(LATENCY_BUCKETS):  # +Inf: the last finite bound is all we know
                return low
            high = LATENCY_BUCKETS[index] * 1000
            return low + (high - low) * (rank - seen) / count
        seen += count
    return LATENCY_BUCKETS[-1] * 1000
