"""Why a domain's tasks wait: the one limit on its rate now, with its figure (issue 34).

``why`` is the only place that decides it, from ``DomainFacts`` read in one go by
``api/progress.py``; the API (``/api/progress``) and the dashboard show its answer as given. The
limits, in the order they are checked (the first that holds is the one in force):

- ``idle``: nothing pending.
- ``inactive``: the domain is switched off.
- ``no_worker`` / ``no_agent``: nothing is running that claims tasks (for a domain routed
  ``agents_only``: no agent is connected, whatever workers run).
- ``breaker_open``: the domain's circuit breaker is open after failures; no claim until it
  half-opens.
- ``no_proxy``: the domain must go through a proxy and none may be used.
- ``scheduled``: every pending task is scheduled later (retries in backoff, ``scheduled_at``).
- ``concurrency``: ``max_concurrent_requests`` requests are in flight.
- ``robots_crawl_delay``, ``throttle``, ``crawl_delay``: one request per gap, the gap set by
  robots.txt's Crawl-delay, the adaptive throttle or the domain's own crawl delay.
- ``workers_busy``: every worker slot is taken.
- ``none``: nothing holds it back but the site's speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from forager.politeness.throttle import effective_delay

Reason = Literal[
    "idle",
    "inactive",
    "no_worker",
    "no_agent",
    "breaker_open",
    "no_proxy",
    "scheduled",
    "concurrency",
    "robots_crawl_delay",
    "throttle",
    "crawl_delay",
    "workers_busy",
    "none",
]


@dataclass(frozen=True, slots=True)
class DomainFacts:
    """What decides a domain's rate now, as read from the database."""

    domain: str
    pending: int  # pending tasks, due or not
    due: int  # pending tasks whose time has come
    in_flight: int  # queued or crawling
    is_active: bool
    crawl_delay: float  # the domain's crawl_delay_seconds (robots.txt may have raised it)
    throttle_delay: float | None
    robots_delay: float | None  # robots.txt's Crawl-delay for the domain's user agent
    max_concurrent: int
    breaker_open_until: datetime | None  # set while the breaker refuses claims
    needs_proxy: bool
    usable_proxies: int
    next_due_at: datetime | None  # the earliest pending task's scheduled_at
    workers: int  # live worker processes
    worker_slots: int  # their concurrency, all together
    workers_in_flight: int
    agents_connected: int
    agents_known: int  # agents not revoked, connected or not
    routing: str = "any"  # any | agents_preferred | agents_only (forager.queue.routing)


@dataclass(frozen=True, slots=True)
class Wait:
    reason: Reason
    message: str  # says what limits the rate and its figure, for a person
    max_pages_per_second: float | None  # the cap this limit puts on the domain, if one


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _rate(per_second: float) -> str:
    if per_second >= 1:
        return f"{per_second:g} page/s" if per_second == 1 else f"{per_second:.3g} pages/s"
    return f"{per_second * 60:.3g} pages/min"


def _pending(facts: DomainFacts) -> str:
    later = facts.pending - facts.due
    return f"{facts.pending} pending" + (f" ({later} scheduled later)" if later else "")


def _gap(facts: DomainFacts) -> tuple[Reason, float] | None:
    """The gap between two requests and where it comes from, if there is one."""
    delay = effective_delay(facts.crawl_delay, facts.throttle_delay)
    if delay <= 0:
        return None
    if facts.throttle_delay is not None and facts.throttle_delay > facts.crawl_delay:
        return "throttle", delay
    if facts.robots_delay is not None and facts.robots_delay >= facts.crawl_delay:
        return "robots_crawl_delay", delay
    return "crawl_delay", delay


def why(facts: DomainFacts, now: datetime) -> Wait:
    """The limit on ``facts``' domain now, in words with its figure."""
    if facts.pending == 0 and facts.in_flight == 0:
        return Wait("idle", "nothing pending", None)
    pending = _pending(facts)
    if not facts.is_active:
        return Wait("inactive", f"domain switched off (activate it to crawl); {pending}", 0.0)
    if facts.routing == "agents_only" and facts.agents_connected == 0:
        return Wait(
            "no_agent",
            f"fetched by agents only and none of the {facts.agents_known} agents is connected "
            f"(workers never take it); {pending}",
            0.0,
        )
    if facts.workers == 0 and facts.agents_connected == 0:
        if facts.agents_known:
            return Wait(
                "no_agent",
                f"no worker is running and none of the {facts.agents_known} agents is "
                f"connected; {pending}",
                0.0,
            )
        return Wait(
            "no_worker",
            f"no worker is running (forager serve or forager worker runs them); {pending}",
            0.0,
        )
    if facts.breaker_open_until is not None and facts.breaker_open_until > now:
        left = (facts.breaker_open_until - now).total_seconds()
        return Wait(
            "breaker_open",
            f"circuit breaker open after repeated failures: no request for {left:.0f} s "
            f"more, then one trial; {pending}",
            0.0,
        )
    if facts.needs_proxy and facts.usable_proxies == 0:
        return Wait(
            "no_proxy", f"needs a proxy and none is usable (add or enable one); {pending}", 0.0
        )
    if facts.due == 0 and facts.in_flight == 0 and facts.next_due_at is not None:
        left = max(0.0, (facts.next_due_at - now).total_seconds())
        return Wait("scheduled", f"next task due in {left:.0f} s; {pending}", None)
    gap = _gap(facts)
    cap = None if gap is None else 1 / gap[1]
    if facts.in_flight >= facts.max_concurrent:
        return Wait(
            "concurrency",
            f"concurrency limit {facts.max_concurrent} per domain reached "
            f"({facts.in_flight} in flight); {pending}",
            cap,
        )
    if gap is not None:
        source, delay = gap
        name = {
            "robots_crawl_delay": "robots.txt Crawl-delay",
            "throttle": "adaptive throttle (the site slowed down or refused)",
            "crawl_delay": "crawl delay",
        }[source]
        return Wait(
            source,
            f"{name} {_seconds(delay)} per domain → at most {_rate(1 / delay)}; {pending}",
            1 / delay,
        )
    by_workers = facts.routing == "any" or (
        facts.routing == "agents_preferred" and facts.agents_connected == 0
    )
    if by_workers and facts.workers and facts.workers_in_flight >= facts.worker_slots:
        return Wait(
            "workers_busy",
            f"all {facts.worker_slots} worker slots are busy (more workers go faster); {pending}",
            None,
        )
    return Wait("none", f"no limit: as fast as the site answers; {pending}", None)
