"""Adaptive recrawl (seed 001's event-based triggers, issue 17): how a recurring task's frequency
follows what its crawls see (pure logic; ``moves.adapt`` writes it).

A task with ``adaptive_recrawl`` starts at ``crawl_frequency_seconds``. After each completed
crawl that produced a product record, the product's persistence says what moved
(``forager.products.persist``, the same comparison the price alerts use, against the last good
values):

- a price or availability change: the frequency is multiplied by ``FASTER`` (halved), down to
  the task's minimum, and the unchanged streak starts again;
- nothing changed: the streak grows and the frequency is multiplied by ``SLOWER``, up to the
  maximum;
- a partial record (a price or availability known before is missing now) or the product's first
  crawl: the frequency stays.

A failed or blocked crawl has no record and changes nothing either: the task keeps its current
frequency for its next crawl. The bounds default to a quarter and seven times the starting
frequency (``default_bounds``).
"""

from __future__ import annotations

from dataclasses import dataclass

FASTER, SLOWER = 0.5, 1.5
MIN_SECONDS, MAX_SECONDS = 60, 31_536_000  # the API's bounds of any crawl frequency
# What persistence reports for one crawl: "changed:<what>", "unchanged", "partial" or "first".
UNCHANGED, PARTIAL, FIRST = "unchanged", "partial", "first"


def changed(what: str) -> str:
    """The signal of a crawl that saw ``what`` move ("price", "availability", both)."""
    return f"changed:{what}"


def default_bounds(base: int) -> tuple[int, int]:
    """(min, max) when the operator gives none: a quarter and seven times ``base``."""
    return max(MIN_SECONDS, base // 4), min(MAX_SECONDS, base * 7)


def within(seconds: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(seconds))))


def human(seconds: int) -> str:
    """A frequency as people say it: 45 min, 6 h, 1.5 d."""
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            value = round(seconds / size, 1)
            return f"{value:g} {unit}"
    return f"{seconds} s"


@dataclass(frozen=True, slots=True)
class Adaptive:
    """A task's adaptive state as claimed: current frequency, bounds, unchanged streak."""

    current: int
    low: int
    high: int
    unchanged: int


@dataclass(frozen=True, slots=True)
class Step:
    """The task's state after one crawl's signal; ``moved`` when the frequency changed."""

    frequency: int
    unchanged: int
    reason: str
    moved: bool


def step(state: Adaptive, signal: str) -> Step:
    """The next frequency after a crawl whose persistence said ``signal``."""
    if signal.startswith("changed:"):
        frequency = within(state.current * FASTER, state.low, state.high)
        what = signal.partition(":")[2]
        return Step(
            frequency, 0, f"{what} changed → {human(frequency)}", frequency != state.current
        )
    if signal == UNCHANGED:
        streak = state.unchanged + 1
        frequency = within(state.current * SLOWER, state.low, state.high)
        times = "once" if streak == 1 else f"{streak} times"
        return Step(
            frequency, streak, f"unchanged {times} → {human(frequency)}", frequency != state.current
        )
    why = "partial record" if signal == PARTIAL else "first crawl"
    return Step(state.current, state.unchanged, f"{why}: kept {human(state.current)}", False)


def start(base: int, low: int, high: int) -> tuple[int, str]:
    """The current frequency and reason of a task whose adaptive settings were just set."""
    frequency = within(base, low, high)
    return frequency, f"starting frequency {human(frequency)}"
