"""Why a domain's tasks wait (``forager.politeness.waits.why``): each limit, its figure, and which
wins when several hold."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from forager.politeness.waits import DomainFacts, why

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
# A domain at the defaults with 180 tasks due, one worker pool of 4 slots, nothing in flight.
BASE = DomainFacts(
    domain="shop.test",
    pending=180,
    due=180,
    in_flight=0,
    is_active=True,
    crawl_delay=0.0,
    throttle_delay=None,
    robots_delay=None,
    max_concurrent=5,
    breaker_open_until=None,
    needs_proxy=False,
    usable_proxies=0,
    next_due_at=NOW,
    workers=1,
    worker_slots=4,
    workers_in_flight=0,
    agents_connected=0,
    agents_known=0,
)


def test_the_default_crawl_delay_says_its_figure_and_the_rate_it_allows() -> None:
    wait = why(replace(BASE, crawl_delay=1.0, in_flight=1), NOW)
    assert wait.reason == "crawl_delay"
    assert wait.message == "crawl delay 1 s per domain → at most 1 page/s; 180 pending"
    assert wait.max_pages_per_second == 1.0


def test_a_long_crawl_delay_is_given_in_pages_per_minute() -> None:
    wait = why(replace(BASE, crawl_delay=4.0), NOW)
    assert wait.message == "crawl delay 4 s per domain → at most 15 pages/min; 180 pending"
    assert wait.max_pages_per_second == 0.25


def test_a_crawl_delay_raised_by_robots_txt_is_named_so() -> None:
    wait = why(replace(BASE, crawl_delay=10.0, robots_delay=10.0), NOW)
    assert wait.reason == "robots_crawl_delay"
    assert wait.message.startswith("robots.txt Crawl-delay 10 s per domain → at most 6 pages/min")


def test_a_robots_delay_below_the_domains_own_is_not_the_limit() -> None:
    assert why(replace(BASE, crawl_delay=5.0, robots_delay=2.0), NOW).reason == "crawl_delay"


def test_the_adaptive_throttle_over_the_crawl_delay_is_the_limit() -> None:
    wait = why(replace(BASE, crawl_delay=1.0, throttle_delay=8.0), NOW)
    assert wait.reason == "throttle"
    assert "8 s per domain" in wait.message
    assert wait.max_pages_per_second == 1 / 8


def test_the_concurrency_limit_when_every_slot_of_the_domain_is_taken() -> None:
    wait = why(replace(BASE, in_flight=5, due=175), NOW)
    assert wait.reason == "concurrency"
    assert wait.message == (
        "concurrency limit 5 per domain reached (5 in flight); 180 pending (5 scheduled later)"
    )


def test_an_open_breaker_says_how_long_it_stays_open() -> None:
    wait = why(replace(BASE, crawl_delay=1.0, breaker_open_until=NOW + timedelta(seconds=42)), NOW)
    assert wait.reason == "breaker_open"
    assert "no request for 42 s more" in wait.message
    assert wait.max_pages_per_second == 0.0


def test_a_breaker_whose_time_is_up_no_longer_holds_the_domain() -> None:
    facts = replace(BASE, breaker_open_until=NOW - timedelta(seconds=1))
    assert why(facts, NOW).reason == "none"


def test_no_usable_proxy_for_a_domain_that_needs_one() -> None:
    facts = replace(BASE, crawl_delay=1.0, needs_proxy=True, usable_proxies=0)
    wait = why(facts, NOW)
    assert (wait.reason, wait.max_pages_per_second) == ("no_proxy", 0.0)
    assert "needs a proxy and none is usable" in wait.message
    assert why(replace(facts, usable_proxies=2), NOW).reason == "crawl_delay"


def test_no_worker_and_no_agent() -> None:
    alone = replace(BASE, crawl_delay=1.0, workers=0, worker_slots=0)
    wait = why(alone, NOW)
    assert wait.reason == "no_worker"
    assert "no worker is running" in wait.message
    wait = why(replace(alone, agents_known=2), NOW)
    assert wait.reason == "no_agent"
    assert "none of the 2 agents is connected" in wait.message
    # A connected agent claims tasks: the crawl delay is the limit again.
    assert why(replace(alone, agents_known=2, agents_connected=1), NOW).reason == "crawl_delay"


def test_all_worker_slots_busy() -> None:
    wait = why(replace(BASE, in_flight=2, workers_in_flight=4), NOW)
    assert wait.reason == "workers_busy"
    assert "all 4 worker slots are busy" in wait.message


def test_tasks_scheduled_later_and_a_switched_off_domain() -> None:
    later = replace(BASE, due=0, next_due_at=NOW + timedelta(seconds=90))
    wait = why(later, NOW)
    assert (wait.reason, wait.message) == (
        "scheduled",
        "next task due in 90 s; 180 pending (180 scheduled later)",
    )
    assert why(replace(BASE, is_active=False), NOW).reason == "inactive"


def test_nothing_pending_and_nothing_in_the_way() -> None:
    assert why(replace(BASE, pending=0, due=0), NOW).reason == "idle"
    wait = why(BASE, NOW)
    assert (wait.reason, wait.max_pages_per_second) == ("none", None)


@pytest.mark.parametrize(
    ("facts", "reason"),
    [
        # The first limit that holds is the one named: a switched-off domain before no worker,
        # no worker before an open breaker, a breaker before a missing proxy.
        (replace(BASE, is_active=False, workers=0), "inactive"),
        (replace(BASE, workers=0, breaker_open_until=NOW + timedelta(seconds=5)), "no_worker"),
        (replace(BASE, needs_proxy=True, breaker_open_until=NOW + timedelta(1)), "breaker_open"),
        (replace(BASE, crawl_delay=1.0, in_flight=5), "concurrency"),
    ],
)
def test_the_first_limit_that_holds_is_named(facts: DomainFacts, reason: str) -> None:
    assert why(facts, NOW).reason == reason
