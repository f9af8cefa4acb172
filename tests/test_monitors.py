"""Live monitors (issue 15): the runner against the local test site, on both engines.

Changes are stored once (identical polls are not), an error burst opens and then closes the
monitor's breaker, leases keep two runners off each other's monitors and hand a dead runner's
monitors over with their history, and a stop finishes the cycle in flight.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Monitor, MonitorSnapshot, ScraperError, ScraperHealthLog
from forager.db.types import utcnow
from forager.errors import ConfigError, InvalidRequest
from forager.fetch.fetcher_set import FetcherSet
from forager.monitors import admin, writes
from forager.monitors import health as monitor_health
from forager.monitors.context import ScraperContext, health_of
from forager.monitors.health import status_of
from forager.monitors.pending import PendingSnapshot, SnapshotQueue
from forager.monitors.runner import (
    MonitorRunner,
    next_interval,
    poll_timeout,
    retry_delay,
)
from forager.monitors.window import PollWindows, bucket_of, recent
from forager.runtime import JsonFormatter, open_database
from forager.worker.parsing import ParsePool
from tests.conftest import SettingsFactory
from tests.support.fetching import require
from tests.support.site import TestSite
from tests.support.waiting import entity_events, event_rows, eventually

FAST = {
    "monitor_claim_seconds": 0.1,
    "monitor_lease_seconds": 3.0,
    "monitor_retry_base_seconds": 0.01,
    "monitor_retry_max_seconds": 0.04,
    "monitor_health_log_seconds": 0.5,
}


@dataclass
class Env:
    db: Database
    settings: Settings
    fetchers: FetcherSet
    parser: ParsePool
    runners: list[tuple[MonitorRunner, asyncio.Task[None]]]

    def start(self, owner: str) -> MonitorRunner:
        runner = MonitorRunner(self.db, self.settings, self.fetchers, self.parser, owner=owner)
        self.runners.append((runner, asyncio.create_task(runner.run())))
        return runner

    async def stop(self, runner: MonitorRunner) -> None:
        runner.stop()
        for r, task in self.runners:
            if r is runner:
                await asyncio.wait_for(task, 30)

    async def monitor(self, monitor_id: int) -> Monitor:
        async with self.db.reader() as session:
            found = await session.get(Monitor, monitor_id)
            assert found is not None
            return found

    async def snapshots(self, monitor_id: int) -> list[Any]:
        async with self.db.reader() as session:
            rows = await session.scalars(
                select(MonitorSnapshot.data)
                .where(MonitorSnapshot.monitor_id == monitor_id)
                .order_by(MonitorSnapshot.id)
            )
            return [r["value"] for r in rows]

    async def create(self, url: str, **kw: Any) -> Monitor:
        spec = admin.MonitorSpec(
            url=url,
            selector_type=kw.pop("selector_type", "json"),
            selectors=kw.pop("selectors", {"value": "value"}),
            interval_seconds=kw.pop("interval_seconds", 0.05),
            min_interval_seconds=kw.pop("min_interval_seconds", 0.05),
            max_interval_seconds=kw.pop("max_interval_seconds", 0.2),
            **kw,
        )
        return await admin.create(self.db, self.settings, spec)


@pytest.fixture
async def env(make_settings: SettingsFactory, request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    marker = request.node.get_closest_marker("monitor_settings")
    settings = make_settings(**FAST, **(marker.kwargs if marker else {}))
    db = await open_database(settings)
    fetchers = FetcherSet(settings)
    parser = ParsePool(settings)
    environment = Env(db, settings, fetchers, parser, [])
    try:
        yield environment
    finally:
        for runner, task in environment.runners:
            runner.stop()
            await asyncio.wait_for(task, 30)
        await parser.aclose()
        await fetchers.aclose()
        await db.dispose()


async def test_changes_are_stored_once_and_identical_polls_are_not(
    env: Env, site: TestSite
) -> None:
    site.set_live("score", 1)
    monitor = await env.create(site.url("/live/score"))
    runner = env.start("runner-a")

    async def polls_at_least(n: int) -> Monitor | None:
        row = await env.monitor(monitor.id)
        return row if row.total_updates >= n else None

    first = await eventually(lambda: polls_at_least(3), "three polls of an unchanged page")
    assert await env.snapshots(monitor.id) == [1]
    assert first.total_changes == 1 and first.last_change_at is not None

    site.set_live("score", 2)
    await eventually(lambda: env.snapshots(monitor.id), "a first snapshot")
    await eventually(lambda: _equals(env.snapshots(monitor.id), [1, 2]), "the change to 2 stored")
    polls = (await env.monitor(monitor.id)).total_updates
    await eventually(lambda: polls_at_least(polls + 3), "three more polls")
    site.set_live("score", 1)
    await eventually(lambda: _equals(env.snapshots(monitor.id), [1, 2, 1]), "the change back")

    await env.stop(runner)
    row = await env.monitor(monitor.id)
    assert row.total_changes == 3
    assert row.total_updates > 6  # many polls, three rows: identical polls are not stored
    assert row.total_errors == 0 and row.consecutive_errors == 0
    assert row.lease_owner is None and row.status == "stopped"  # a graceful stop gives it back
    assert row.min_interval_seconds <= row.current_interval_seconds <= row.max_interval_seconds
    async with env.db.reader() as session:
        events = list(
            await session.scalars(
                select(ScraperHealthLog.event)
                .where(ScraperHealthLog.monitor_id == monitor.id)
                .order_by(ScraperHealthLog.id)
            )
        )
    assert events[0] == "start" and events[-1] == "stop"


async def _equals(values: Any, expected: list[Any]) -> bool:
    return await values == expected


@pytest.mark.monitor_settings(
    breaker_failure_threshold=3,
    breaker_open_seconds=0.5,
    breaker_success_threshold=2,
    monitor_restart_errors=2,
)
async def test_an_error_burst_opens_the_breaker_then_it_closes(env: Env, site: TestSite) -> None:
    site.set_live("down", 5, status=503)
    monitor = await env.create(site.url("/live/down"))
    env.start("runner-a")

    async def state() -> str:
        return (await env.monitor(monitor.id)).breaker_state

    await eventually(lambda: _is(state(), "open"), "the breaker to open")
    async with env.db.reader() as session:
        errors = list(
            await session.scalars(
                select(ScraperError)
                .where(ScraperError.monitor_id == monitor.id)
                .order_by(ScraperError.id)
            )
        )
    assert len(errors) >= 3
    first = errors[0]
    assert (first.error_type, first.category, first.operation) == ("http_5xx", "network", "poll")
    assert [e.retry_attempt for e in errors[:3]] == [0, 1, 2]  # the cycle's retries
    assert "Traceback" in (first.stack_trace or "") and "503" in (first.error_message or "")
    assert not any(e.resolved for e in errors)
    row = await env.monitor(monitor.id)
    assert row.health_status in ("degraded", "failing") and row.total_errors >= 3

    site.set_live("down", 6)
    await eventually(lambda: _is(state(), "closed"), "the breaker to close again")
    await eventually(lambda: _equals(env.snapshots(monitor.id), [6]), "the recovered value")
    row = await env.monitor(monitor.id)
    assert row.consecutive_errors == 0 and row.health_status == "healthy"
    assert row.restarts >= 1  # more than monitor_restart_errors errors in a row restarted it
    async with env.db.reader() as session:
        methods = set(
            await session.scalars(
                select(ScraperError.resolution_method).where(ScraperError.monitor_id == monitor.id)
            )
        )
    assert methods == {"circuit_breaker"}  # every error resolved, by the breaker's recovery
    events = await entity_events(env.db, "monitor", monitor.id)
    assert events.index("breaker_open") < events.index("breaker_closed")
    assert "restarted" in events


async def _is(value: Any, expected: Any) -> bool:
    return await value == expected


async def test_two_runners_never_run_the_same_monitor(env: Env, site: TestSite) -> None:
    ids = []
    for n in range(6):
        site.set_live(f"m{n}", n)
        ids.append((await env.create(site.url(f"/live/m{n}"))).id)
    # Racing claims: every monitor is won by exactly one claimer.
    won_a, won_b = await asyncio.gather(
        writes.claim(env.db, "a", env.settings, 10), writes.claim(env.db, "b", env.settings, 10)
    )
    a_ids, b_ids = {m.id for m in won_a}, {m.id for m in won_b}
    assert not a_ids & b_ids and a_ids | b_ids == set(ids)
    async with env.db.session() as session:  # hand them back
        await session.execute(update(Monitor).values(lease_owner=None, lease_expires_at=None))

    one, two = env.start("runner-1"), env.start("runner-2")

    async def all_polled() -> bool:
        async with env.db.reader() as session:
            n = await session.scalar(
                select(func.count()).where(Monitor.total_updates >= 3, Monitor.id.in_(ids))
            )
            return n == len(ids)

    await eventually(all_polled, "every monitor polled by one runner or the other")
    assert not set(one.running) & set(two.running)
    assert set(one.running) | set(two.running) == set(ids)
    async with env.db.reader() as session:
        owners = dict((await session.execute(select(Monitor.id, Monitor.lease_owner))).all())
        starts = await session.scalar(select(func.count()).where(ScraperHealthLog.event == "start"))
    assert {owners[i] for i in one.running} <= {"runner-1"}
    assert {owners[i] for i in two.running} <= {"runner-2"}
    assert starts == len(ids)  # no monitor was ever started twice


async def test_a_dead_runners_monitor_is_taken_over_with_its_history(
    env: Env, site: TestSite
) -> None:
    site.set_live("orphan", 2)
    monitor = await env.create(site.url("/live/orphan"))
    # A process that ran it and died: a lease that has expired, counters and one change.
    old = utcnow() - timedelta(seconds=30)
    async with env.db.session() as session:
        await session.execute(
            update(Monitor)
            .where(Monitor.id == monitor.id)
            .values(
                lease_owner="dead:1:worker:x",
                lease_expires_at=old,
                scraper_id="dead-run",
                total_polls=40,
                total_updates=40,
                total_changes=1,
                status="active",
            )
        )
        session.add(MonitorSnapshot(monitor_id=monitor.id, data={"value": 1}, content_hash="x"))
    live = env.start("survivor")
    await eventually(lambda: _is(_owner(env, monitor.id), "survivor"), "the takeover")
    await eventually(lambda: _equals(env.snapshots(monitor.id), [1, 2]), "the next change")
    row = await env.monitor(monitor.id)
    assert row.total_updates > 40 and row.total_changes == 2  # counters continue
    assert row.scraper_id not in (None, "dead-run")  # a run of its own
    assert monitor.id in live.running


async def _owner(env: Env, monitor_id: int) -> str | None:
    return (await env.monitor(monitor_id)).lease_owner


async def test_pause_stops_the_runner_and_resume_lets_it_claim_again(
    env: Env, site: TestSite
) -> None:
    site.set_live("p", 1)
    monitor = await env.create(site.url("/live/p"))
    runner = env.start("runner-a")
    await eventually(lambda: monitor.id in runner.running, "the claim")
    await admin.pause(env.db, monitor.id)
    await eventually(lambda: monitor.id not in runner.running, "the runner to let it go")
    paused = await env.monitor(monitor.id)
    assert (paused.status, paused.enabled, paused.lease_owner) == ("paused", False, None)
    polls = paused.total_polls
    await admin.resume(env.db, monitor.id)
    await eventually(lambda: monitor.id in runner.running, "the claim after resume")
    await eventually(lambda: _more(env, monitor.id, polls), "polls after resume", timeout=30)


async def _more(env: Env, monitor_id: int, polls: int) -> bool:
    return (await env.monitor(monitor_id)).total_polls > polls


async def test_stop_finishes_the_cycle_in_flight(env: Env, site: TestSite) -> None:
    monitor = await env.create(
        site.url("/hold/stop"), selector_type=None, selectors=None, parser_name="generic"
    )
    runner = env.start("runner-a")
    await eventually(lambda: site.held("stop") == 1, "a poll waiting on the page")
    runner.stop()
    site.release("stop")
    await env.stop(runner)
    row = await env.monitor(monitor.id)
    assert row.total_updates == 1 and row.lease_owner is None  # finished, written, given back
    async with env.db.reader() as session:
        [snapshot] = list(await session.scalars(select(MonitorSnapshot.data)))
    assert snapshot["product_name"]


# -- rules without a clock ---------------------------------------------------------------------


def test_overall_monitor_status_follows_the_seed() -> None:
    # (enabled, running, stale or failing, errors in the last minute)
    assert status_of(0, 0, 0, 0)[0] == "healthy"  # watching nothing is not down
    assert status_of(2, 2, 0, 4)[0] == "healthy"
    assert status_of(1, 0, 0, 0)[0] == "down"  # no active scraper while one is enabled
    assert status_of(2, 1, 0, 0)[0] == "degraded"  # one enabled has no process yet
    assert status_of(2, 2, 1, 0)[0] == "degraded"  # some stale or failing
    assert status_of(2, 2, 0, 5)[0] == "degraded"  # 5-10 errors a minute
    assert status_of(2, 2, 0, 11)[0] == "down"  # more than 10


def test_health_and_restart_rules_follow_the_seed(settings: Settings) -> None:
    now = utcnow()
    ago = lambda s: now - timedelta(seconds=s)  # noqa: E731
    assert health_of(0, ago(1), ago(9), now, settings) == "healthy"
    assert health_of(3, ago(1), ago(9), now, settings) == "degraded"  # > 2 errors
    assert health_of(6, ago(1), ago(9), now, settings) == "failing"  # > 5 errors
    assert health_of(0, ago(121), ago(999), now, settings) == "degraded"  # > 120 s stale
    assert health_of(0, ago(301), ago(999), now, settings) == "failing"  # > 300 s stale
    assert health_of(0, None, ago(301), now, settings) == "failing"  # never succeeded
    ctx = ScraperContext(1, "http://x/", settings, start_time=ago(10), last_update_time=ago(1))
    assert ctx.restart_reason(now) is None
    ctx.start_time = ago(6 * 3600 + 1)
    assert ctx.restart_reason(now) == "lifetime"
    ctx.start_time, ctx.last_update_time = ago(10), ago(301)
    assert ctx.restart_reason(now) == "staleness"
    ctx.last_update_time, ctx.error_count = ago(1), 11
    assert ctx.restart_reason(now) == "errors"
    ctx.error_count, ctx.memory_bytes = 10, 1536 * 1024 * 1024 + 1
    ctx.start_time = ago(61)
    assert ctx.restart_reason(now) == "memory" and not ctx.over_hard_limit()
    ctx.start_time = ago(30)  # a run restarts for memory at most once a minute
    assert ctx.restart_reason(now) is None
    ctx.measure()  # psutil over this process and its children
    assert ctx.memory_bytes > 0
    assert [retry_delay(n, settings) for n in range(6)] == [1, 2, 4, 8, 16, 16]
    assert next_interval(2.5, "changed", 0.5, 60) == 1.25
    assert next_interval(50, "unchanged", 0.5, 60) == 60
    assert next_interval(0.6, "changed", 0.5, 60) == 0.5
    assert [bucket_of(ms) for ms in (10, 50, 51, 30_000, 30_001)] == [0, 0, 1, 8, 9]
    # Adaptive timeouts: 5 × the usual poll time, within [5 s, 30 s]; unknown: the ceiling.
    assert poll_timeout(None, settings) == 30
    assert poll_timeout(100, settings) == 5
    assert poll_timeout(2000, settings) == 10
    assert poll_timeout(60_000, settings) == 30


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"monitor_max_interval_seconds": 150}, "FORAGER_MONITOR_MAX_INTERVAL_SECONDS"),
        ({"monitor_degraded_seconds": 400}, "FORAGER_MONITOR_DEGRADED_SECONDS"),
        ({"monitor_memory_soft_limit_mb": 4096}, "FORAGER_MONITOR_MEMORY_SOFT_LIMIT_MB"),
        ({"monitor_claim_seconds": 20}, "FORAGER_MONITOR_CLAIM_SECONDS"),
        ({"monitor_interval_seconds": 0.1}, "FORAGER_MONITOR_INTERVAL_SECONDS"),
        ({"monitor_slots": -1}, "FORAGER_MONITOR_SLOTS"),
        ({"log_format": "xml"}, "FORAGER_LOG_FORMAT"),
        ({"log_level": "LOUD"}, "FORAGER_LOG_LEVEL"),
    ],
)
def test_bad_monitor_settings_are_refused_naming_the_key(
    make_settings: SettingsFactory, overrides: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        make_settings(**overrides)


async def test_bad_monitor_specs_are_refused_naming_the_field(env: Env) -> None:
    cases = [
        ({"selectors": {"v": "a["}, "selector_type": "css"}, "css"),
        ({"selectors": {"bad name": "x"}}, "json_paths"),
        ({"selectors": None, "parser_name": None}, "parser_name"),
        ({"parser_name": "generic"}, "parser_name"),
        ({"fetcher": "telnet"}, "fetcher"),
        ({"max_interval_seconds": 500.0}, "max_interval_seconds"),
        ({"end_states": ("ended",)}, "end_states"),
    ]
    for overrides, field in cases:
        with pytest.raises(InvalidRequest) as refused:
            await env.create("http://127.0.0.1/x", **overrides)
        assert refused.value.field == field, overrides
    async with env.db.reader() as session:
        assert await session.scalar(select(func.count()).select_from(Monitor)) == 0
    # Bounds widen to hold the baseline: a minimum above it is lowered, a maximum raised.
    widened = await env.create(
        "http://127.0.0.1/x",
        interval_seconds=5.0,
        min_interval_seconds=9.0,
        max_interval_seconds=2.0,
    )
    assert (widened.min_interval_seconds, widened.max_interval_seconds) == (5.0, 5.0)


async def test_old_health_samples_and_resolved_errors_are_cleaned(env: Env) -> None:
    old = utcnow() - timedelta(days=31)
    async with env.db.session() as session:
        session.add_all(
            [
                ScraperHealthLog(scraper_id="s", health_status="healthy", timestamp=old),
                ScraperHealthLog(scraper_id="s", health_status="healthy"),
                ScraperError(
                    scraper_id="s",
                    error_type="network",
                    category="network",
                    timestamp=old,
                    resolved=True,
                    resolution_method="auto_retry",
                ),
                # An old error nobody resolved stays until someone does.
                ScraperError(
                    scraper_id="s", error_type="network", category="network", timestamp=old
                ),
            ]
        )
    assert await admin.clean_logs(env.db, env.settings) == (1, 1)
    async with env.db.reader() as session:
        assert await session.scalar(select(func.count()).select_from(ScraperHealthLog)) == 1
        assert await session.scalar(select(ScraperError.resolved)) is False


async def test_state_changes_are_events_and_an_end_state_stops_the_monitor(
    env: Env, site: TestSite
) -> None:
    site.set_live("match", "live")
    monitor = await env.create(site.url("/live/match"), state_field="value", end_states=("ended",))
    runner = env.start("runner-a")
    await eventually(lambda: _equals(env.snapshots(monitor.id), ["live"]), "the first state")
    site.set_live("match", "halftime")
    await eventually(lambda: _equals(env.snapshots(monitor.id), ["live", "halftime"]), "halftime")
    site.set_live("match", "ended")
    await eventually(lambda: monitor.id not in runner.running, "the monitor to stop itself")
    row = await env.monitor(monitor.id)
    assert (row.enabled, row.status, row.last_state, row.lease_owner) == (
        False,
        "stopped",
        "ended",
        None,
    )
    assert await env.snapshots(monitor.id) == ["live", "halftime", "ended"]
    details = [
        (e.event, e.details)
        for e in await event_rows(env.db, "monitor", monitor.id)
        if e.event in ("state_changed", "ended")
    ]
    assert details == [
        ("state_changed", {"from": None, "to": "live"}),
        ("state_changed", {"from": "live", "to": "halftime"}),
        ("state_changed", {"from": "halftime", "to": "ended"}),
        ("ended", {"state": "ended"}),
    ]


def test_seed_log_levels_and_json_logs(make_settings: SettingsFactory) -> None:
    for level in ("WARN", "CRITICAL", "warning"):
        assert make_settings(log_level=level).log_level == level
    record = logging.LogRecord("forager.x", logging.WARNING, __file__, 1, "a %s", ("b",), None)
    entry = json.loads(JsonFormatter().format(record))
    assert (entry["level"], entry["logger"], entry["message"]) == ("WARNING", "forager.x", "a b")
    assert entry["time"]


@pytest.mark.monitor_settings(monitor_max_lifetime_hours=0.0006, fetch_timeout_seconds=20.0)
# Chromium's handling does not depend on the engine.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_browser_monitor_has_its_own_chromium_renewed_on_restart(
    env: Env, site: TestSite
) -> None:
    require("browser")
    from forager.fetch.browser import browser_processes, running_browsers

    monitor = await env.create(
        site.url("/js-price/31"),
        fetcher="browser",
        selector_type="css",
        selectors={"price": "#price"},
        interval_seconds=0.3,
        min_interval_seconds=0.3,
        max_interval_seconds=0.5,
    )
    runner = env.start("runner-a")

    async def marker() -> str | None:
        loops = runner.loops.get(monitor.id)
        return loops[0].browser_marker if loops else None

    first = await eventually(marker, "the monitor's own Chromium", timeout=90)
    await eventually(lambda: browser_processes(first), "its processes", timeout=90)

    async def rendered() -> bool:
        async with env.db.reader() as session:
            rows = list(await session.scalars(select(MonitorSnapshot.data)))
        return rows == [{"price": "$31.99"}]  # rendered by JavaScript

    await eventually(rendered, "the rendered price", timeout=90)
    assert running_browsers() == 0  # not the process's shared browser
    # Its run lives ~2 s here: the restart closes that Chromium and the next run starts another.
    second = await eventually(
        lambda: _other_marker(marker, first), "a new Chromium after the restart", timeout=90
    )
    await eventually(lambda: not browser_processes(first), "the old Chromium gone", timeout=60)
    row = await env.monitor(monitor.id)
    assert row.restarts >= 1 and (row.memory_bytes or 0) > 0  # measured: its own tree only
    await env.stop(runner)
    assert browser_processes(second) == []  # a graceful stop closes it too


async def _other_marker(marker: Any, first: str) -> str | None:
    now = await marker()
    return now if now not in (None, first) else None


@pytest.mark.monitor_settings(
    monitor_memory_soft_limit_mb=64,  # below any Chromium: its first measure is over it
    monitor_memory_restart_min_seconds=1.0,
    fetch_timeout_seconds=20.0,
)
# Chromium's handling does not depend on the engine.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_browser_over_the_soft_memory_limit_restarts_gracefully(
    env: Env, site: TestSite, caplog: pytest.LogCaptureFixture
) -> None:
    reasons, kills = await _memory_restart(env, site, caplog)
    assert reasons[0] == "memory", reasons  # the soft limit's own reason
    assert "memory_hard" not in reasons and kills == []  # and it never kills (hard: 2 GB)


@pytest.mark.monitor_settings(
    monitor_memory_soft_limit_mb=64,
    monitor_memory_hard_limit_mb=64,  # over it: killed at once, whatever the run's age
    fetch_timeout_seconds=20.0,
)
# Chromium's handling does not depend on the engine.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_browser_over_the_hard_memory_limit_is_killed_and_restarted(
    env: Env, site: TestSite, caplog: pytest.LogCaptureFixture
) -> None:
    reasons, kills = await _memory_restart(env, site, caplog)
    # Killed, not restarted gracefully: over the soft limit too, but a run restarts for that
    # only after monitor_memory_restart_min_seconds (60 s), long after this one was killed.
    assert reasons[0] == "memory_hard" and kills, (reasons, kills)
    assert "memory" not in reasons


_RESTARTING = re.compile(r"monitor \d+: restarting run \S+ \((\w+)\)")


async def _memory_restart(
    env: Env, site: TestSite, caplog: pytest.LogCaptureFixture
) -> tuple[list[str], list[str]]:
    """Run a browser monitor until its run restarts; the restarts' reasons (from the runner's
    log, oldest first) and its hard-limit kills (log lines)."""
    require("browser")
    caplog.set_level(logging.WARNING, logger="forager.monitors.runner")
    site.set_live("mem", 5)
    monitor = await env.create(
        site.url("/live/mem?format=html"),
        fetcher="browser",
        selector_type="css",
        selectors={"value": "#value"},
        interval_seconds=0.3,
        min_interval_seconds=0.3,
        max_interval_seconds=0.5,
    )
    env.start("runner-a")

    async def restarted() -> Monitor | None:
        row = await env.monitor(monitor.id)
        return row if row.restarts >= 1 and row.total_updates >= 2 else None

    await eventually(restarted, "a memory restart", timeout=90)
    assert await env.snapshots(monitor.id) == ["5"]  # history kept, no duplicate
    async with env.db.reader() as session:
        samples = (
            await session.execute(
                select(ScraperHealthLog.event, ScraperHealthLog.memory_mb).where(
                    ScraperHealthLog.monitor_id == monitor.id
                )
            )
        ).all()
    # The run's last sample, written as it restarted, shows its Chromium over the limit.
    assert any(event == "restart" and (mb or 0) > 64 for event, mb in samples), samples
    runner_log = [r for r in caplog.records if r.name == "forager.monitors.runner"]
    reasons = [m[1] for r in runner_log if (m := _RESTARTING.match(r.getMessage()))]
    kills = [r.getMessage() for r in runner_log if "over the hard limit: killed" in r.getMessage()]
    assert reasons, [r.getMessage() for r in runner_log]
    return reasons, kills


# -- the bounded result queue (seed MAX_QUEUE_SIZE / MAX_QUEUE_SIZE_MB) -----------------------


def _snap(monitor_id: int, value: Any) -> PendingSnapshot:
    return PendingSnapshot.of(monitor_id, {"value": value}, f"h{value}", utcnow(), "s", 5)


def test_a_full_result_queue_drops_the_oldest_never_the_latest() -> None:
    queue = SnapshotQueue(max_items=2, max_bytes=10_000)
    for value in (1, 2, 3):
        queue.put(_snap(1, value))
    assert [s.data["value"] for s in queue.take()] == [2, 3] and queue.dropped == 1
    assert queue.take_drops() == {1: 1} and not queue.unrecorded_drops
    # A failed write's batch goes back ahead of newer ones; over the bound, it goes first.
    queue.put(_snap(2, "new"))
    queue.give_back([_snap(1, "a"), _snap(1, "b")])
    assert [s.data["value"] for s in queue.take()] == ["b", "new"]
    # The byte bound: one snapshot larger than the whole budget is still kept (the latest).
    small = SnapshotQueue(max_items=100, max_bytes=40)
    small.put(_snap(3, "x" * 10))
    small.put(_snap(3, "y" * 100))
    assert [s.data["value"][0] for s in small.take()] == ["y"] and small.dropped == 1


async def test_queued_snapshots_and_drops_are_written_with_the_next_poll(env: Env) -> None:
    a = await env.create("http://127.0.0.1:9/a")
    b = await env.create("http://127.0.0.1:9/b")
    assert {m.id for m in await writes.claim(env.db, "o", env.settings, 2)} == {a.id, b.id}
    queue = SnapshotQueue(max_items=2, max_bytes=10_000)
    for snapshot in (_snap(a.id, 1), _snap(a.id, 2), _snap(a.id, 3), _snap(b.id, 9)):
        queue.put(snapshot)  # a's 1 and 2 are dropped: a write failed meanwhile, say
    common: dict[str, Any] = {
        "now": utcnow(),
        "queue": queue,
        "digest": "h3",
        "latency_ms": 5,
        "interval": 1.0,
        "health": "healthy",
        "memory_bytes": 0,
        "cpu_percent": 0.0,
        "breaker_before": "closed",
        "resolution": None,
    }
    # A process that lost a's lease writes nothing of a; b's snapshot waits for the next write.
    assert (
        await writes.record_success(env.db, env.settings, owner="x", monitor_id=a.id, **common)
        is None
    )
    assert [s.monitor_id for s in queue.take()] == [b.id]
    queue.give_back([_snap(a.id, 3), _snap(b.id, 9)])
    queue.unrecorded_drops.update({a.id: 2})
    written = await writes.record_success(
        env.db, env.settings, owner="o", monitor_id=a.id, **common
    )
    assert written is not None and len(queue) == 0 and not queue.unrecorded_drops
    assert (await env.snapshots(a.id), await env.snapshots(b.id)) == ([3], [9])
    row_a, row_b = await env.monitor(a.id), await env.monitor(b.id)
    assert (row_a.total_changes, row_a.dropped_snapshots, row_b.total_changes) == (1, 2, 1)
    async with env.db.reader() as session:
        seen = await monitor_health.summary(session, env.settings, utcnow())
    assert seen.resources["dropped_snapshots"] == 2
    # What a runner's tick or graceful stop flushes when no poll writes.
    queue.put(_snap(b.id, 10))
    assert await writes.flush(env.db, queue) == 1
    assert await env.snapshots(b.id) == [9, 10]


def test_recent_polls_give_updates_per_minute_and_p95_from_records() -> None:
    start = utcnow()
    at = lambda s: start + timedelta(seconds=s)  # noqa: E731
    windows = PollWindows()
    for n in range(20):  # 20 polls in the first minute: 19 of 40 ms, one of 900 ms
        windows.record(at(n), 900 if n == 7 else 40)
    for n in range(10):  # 10 in the second
        windows.record(at(60 + n), 40)
    seen = recent([windows.dump(), None, {"bad": 1}], at(90))
    assert seen.updates_per_minute == round(30 * 60 / 90, 1)  # 30 polls over 90 s
    assert seen.average_latency_ms == round((29 * 40 + 900) / 30, 1)
    assert 0 < seen.p95_latency_ms <= 50  # 29 of 30 are in the first bucket
    # Two minutes without a poll: nothing recent is left.
    assert recent([windows.dump()], at(200)).updates_per_minute == 0
