"""What an alert rule means: its kinds and when a product observation fires it (pure logic).

Price rules compare the new price with the last *good* one (a crawl that read no price never
counts as a change: the value before it stands). ``price_below`` / ``price_above`` fire on each
crossing of the threshold, so a price that goes back up and drops again alerts again. A move
smaller than ``min_change_abs`` or ``min_change_pct`` is noise and fires nothing. With
``fire_on_first`` a rule also fires on a product's first observation when its condition
already holds (a price already below the threshold, a product already in stock).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

PRICE_KINDS = ("price_drop", "price_rise", "price_below", "price_above")
STOCK_KINDS = ("back_in_stock", "out_of_stock")
PRODUCT_KINDS = (*PRICE_KINDS, *STOCK_KINDS)
EVENT_KINDS = (
    "task_failed",
    "breaker_opened",
    "agent_blocked",
    "mission_finished",
    "mission_failed",
    "monitor_changed",  # a monitor read a new value (a snapshot: its state field is one)
    "budget_exhausted",  # a crawl job ran out of pages or time
)
# Operational conditions the scheduler measures every FORAGER_ALERT_EVALUATE_SECONDS
# (``forager.alerts.watch``): each fires once per episode and is told again when it clears.
WATCHED_KINDS = (
    "proxies_low",  # active proxies below ``threshold``
    "failure_rate_high",  # failed fetches over ``window_seconds`` at or above ``percent``
    "parse_rate_low",  # pages parsed over ``window_seconds`` below ``percent``
    "monitor_stale",  # no successful poll for ``window_seconds``
    "monitor_failing",  # ``min_attempts`` polls in a row failed
)
# Kinds with episodes (firing, then cleared); budget_exhausted's clears when the job runs again.
EPISODE_KINDS = (*WATCHED_KINDS, "budget_exhausted")
KINDS = (*PRODUCT_KINDS, *EVENT_KINDS, *WATCHED_KINDS)

# Audit events (entity type, event) that are alert events; a task moving to failed is the other.
AUDIT_KINDS = {
    ("domain", "breaker_open"): "breaker_opened",  # the breaker's transition event
    ("agent", "blocked"): "agent_blocked",
    ("mission", "mission_completed"): "mission_finished",
    ("mission", "mission_failed"): "mission_failed",
    ("crawl_job", "budget_exhausted"): "budget_exhausted",
}


class PriceRule(Protocol):
    kind: str
    percent: float | None
    threshold: Decimal | None
    min_change_abs: Decimal | None
    min_change_pct: float | None
    fire_on_first: bool


@dataclass(frozen=True, slots=True)
class Observation:
    """A product as just saved, and the last good values before it (None: never seen)."""

    product_id: int
    domain_id: int
    task_id: int | None
    url: str
    name: str
    currency: str | None
    price: Decimal | None
    available: bool | None
    old_price: Decimal | None
    old_available: bool | None


def change_pct(old: Decimal, new: Decimal) -> float | None:
    """The move from ``old`` to ``new`` in percent of ``old`` (None when old is 0)."""
    return None if old == 0 else float((new - old) / old * 100)


def fires(rule: PriceRule, seen: Observation) -> bool:
    """Does ``seen`` fire ``rule`` (a product kind)?"""
    if rule.kind in STOCK_KINDS:
        return _stock_fires(rule, seen.old_available, seen.available)
    return _price_fires(rule, seen.old_price, seen.price)


def _stock_fires(rule: PriceRule, old: bool | None, new: bool | None) -> bool:
    if new is None:  # not read this time: the last good value stands
        return False
    wanted = rule.kind == "back_in_stock"
    if old is None:
        return rule.fire_on_first and new is wanted
    return old is not wanted and new is wanted


def _price_fires(rule: PriceRule, old: Decimal | None, new: Decimal | None) -> bool:
    if new is None:
        return False
    threshold = rule.threshold
    if old is None:
        if not rule.fire_on_first or threshold is None:
            return False
        return (
            new < threshold
            if rule.kind == "price_below"
            else rule.kind == "price_above" and new > threshold
        )
    delta = new - old
    if delta == 0 or _noise(rule, old, delta):
        return False
    if rule.kind in ("price_drop", "price_rise"):
        if (delta < 0) != (rule.kind == "price_drop"):
            return False
        pct = change_pct(old, new)
        return rule.percent is None or (pct is not None and abs(pct) >= rule.percent)
    if threshold is None:
        return False
    if rule.kind == "price_below":
        return old >= threshold > new
    return old <= threshold < new


def _noise(rule: PriceRule, old: Decimal, delta: Decimal) -> bool:
    if rule.min_change_abs is not None and abs(delta) < rule.min_change_abs:
        return True
    if rule.min_change_pct is not None and old != 0:
        return float(abs(delta) / old * 100) < rule.min_change_pct
    return False
