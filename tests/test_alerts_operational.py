"""Operational alerts (issue 35): every kind fired and cleared from a real crawl against the
test site — failed fetches, pages that are not products, a live monitor that changes, fails and
goes stale, a crawl job that spends its page budget, proxies switched off — and delivered to a
real loopback receiver, once per episode however often (or by how many at once) the rules are
measured, on both engines."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import select

from forager.alerts import admin, detect, watch
from forager.alerts.admin import RuleSpec
from forager.alerts.deliver import Deliverer
from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import AlertDelivery, Proxy
from forager.discovery import admin as jobs_admin
from forager.discovery.jobs import JobSpec, start
from forager.errors import InvalidRequest
from forager.fetch.fetcher_set import FetcherSet
from forager.monitors import admin as monitors
from forager.monitors.runner import MonitorRunner
from forager.proxies.admin import update_proxy
from forager.runtime import open_database
from forager.worker.parsing import ParsePool
from tests.conftest import SettingsFactory
from tests.support.crawling import crawl, run_pool_until, submit
from tests.support.receiver import Receiver
from tests.support.site import TestSite
from tests.support.waiting import eventually

SETTINGS = {
    "max_retries": 0,
    "breaker_failure_threshold": 100,  # the domain stays open to the failures measured here
    "throttle_max_delay_seconds": 0,  # and is not slowed down by them
    "alert_evaluate_seconds": 3600,  # measured when the test says: its crawls run no scheduler
    "alert_retry_base_seconds": 0.05,
    "monitor_claim_seconds": 0.1,
    "monitor_lease_seconds": 3.0,
    "monitor_retry_base_seconds": 0.01,
    "monitor_retry_max_seconds": 0.04,
}


async def _rule(db: Database, settings: Settings, hook: str, kind: str, **values: Any) -> int:
    rule, _ = await admin.create_rule(
        db,
        SecretBox(settings),
        RuleSpec(name=kind, kind=kind, webhook_url=hook, **values),
        private_targets=settings.private_targets,
    )
    return rule.id


async def _told(db: Database) -> Counter[tuple[str, str]]:
    """Deliveries queued so far by (kind, state): ``fired``, ``cleared`` or ``event``."""
    async with db.reader() as session:
        rows = await session.scalars(select(AlertDelivery.payload).order_by(AlertDelivery.id))
        return Counter((p["event"], _state(p)) for p in rows)


def _state(payload: dict[str, Any]) -> str:
    return {"firing": "fired", "cleared": "cleared"}.get(payload.get("state", ""), "event")


class Tally:
    """What each step adds to the outbox."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.seen: Counter[tuple[str, str]] = Counter()

    async def new(self) -> Counter[tuple[str, str]]:
        now = await _told(self.db)
        added, self.seen = now - self.seen, now
        return added


async def test_every_operational_kind_fires_once_and_clears_from_a_real_crawl(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(**SETTINGS)
    db = await open_database(settings)
    detect.install()
    fetchers, parser = FetcherSet(settings), ParsePool(settings)
    async with Receiver() as receiver:
        try:
            await _scenario(db, settings, site, receiver, fetchers, parser)
        finally:
            await parser.aclose()
            await fetchers.aclose()
            await db.dispose()


async def _scenario(
    db: Database,
    settings: Settings,
    site: TestSite,
    receiver: Receiver,
    fetchers: FetcherSet,
    parser: ParsePool,
) -> None:
    hook = receiver.url
    for kind, values in (
        ("failure_rate_high", {"percent": 50, "batch_name": "fail", "min_attempts": 2}),
        ("parse_rate_low", {"percent": 60, "batch_name": "parse", "min_attempts": 2}),
        ("budget_exhausted", {}),
        ("proxies_low", {"threshold": 1}),
    ):
        await _rule(db, settings, hook, kind, **values)
    async with db.session() as session:
        proxy = Proxy(proxy_url="10.9.9.9", proxy_port=3128)  # never mapped: never used
        session.add(proxy)
    tally = Tally(db)

    # Failed fetches (a batch) and pages that are not products (another batch).
    failing = [site.url(f"/flaky/ops{n}?fail=99") for n in range(2)]
    articles = [site.url(f"/notproduct?kb={n + 1}") for n in range(2)]
    ids = await submit(db, settings, *failing, batch_name="fail")
    ids += await submit(db, settings, *articles, batch_name="parse")
    # No scheduler in the pool: its own measure at start, late on a loaded machine, would open
    # or clear an episode between the test's measures and take that step's count from them.
    await crawl(db, settings, ids, run_scheduler=False)
    # Measured by two processes at once: each episode opens once (compare-and-set).
    assert sum(await asyncio.gather(watch.evaluate(db), watch.evaluate(db))) == 2
    assert await tally.new() == {("failure_rate_high", "fired"): 1, ("parse_rate_low", "fired"): 1}
    assert await watch.evaluate(db) == 0  # still firing: nobody is told again
    # Good pages in both batches: 2 failed of 5 (40 %), 3 parsed of 5 (60 %): both clear.
    ids = await submit(db, settings, *(site.url(f"/product/{n}") for n in (61, 62, 63)),
                       batch_name="fail")  # fmt: skip
    ids += await submit(db, settings, *(site.url(f"/product/{n}") for n in (64, 65, 66)),
                        batch_name="parse")  # fmt: skip
    await crawl(db, settings, ids, run_scheduler=False)
    assert await watch.evaluate(db) == 2
    assert await tally.new() == {
        ("failure_rate_high", "cleared"): 1,
        ("parse_rate_low", "cleared"): 1,
    }

    # A live monitor: its value changes, then it fails and goes stale, then recovers.
    site.set_live("ops", 1)
    monitor = await monitors.create(
        db,
        settings,
        monitors.MonitorSpec(
            url=site.url("/live/ops"),
            selector_type="json",
            selectors={"value": "value"},
            state_field="value",
            interval_seconds=0.05,
            min_interval_seconds=0.05,
            max_interval_seconds=0.1,
        ),
    )
    watching = [
        await _rule(db, settings, hook, kind, monitor_id=monitor.id, **values)
        for kind, values in (
            ("monitor_changed", {}),
            ("monitor_failing", {"min_attempts": 2}),
            ("monitor_stale", {"window_seconds": 1}),
        )
    ]
    runner = MonitorRunner(db, settings, fetchers, parser, owner="ops-test")
    running = asyncio.create_task(runner.run())
    try:
        await eventually(lambda: _has(tally, ("monitor_changed", "event")), "the first value")
        site.set_live("ops", 2)
        await eventually(lambda: _has(tally, ("monitor_changed", "event")), "the value change")
        # One notice per new value, its state field's move included (not one more for that).
        assert (await _told(db))[("monitor_changed", "event")] == 2
        site.set_live("ops", 2, status=500)

        async def failing_and_stale() -> bool:
            await watch.evaluate(db)
            told = await _told(db)
            return told[("monitor_failing", "fired")] == 1 and told[("monitor_stale", "fired")] == 1

        await eventually(failing_and_stale, "the monitor to fail and go stale")
        site.set_live("ops", 2)  # the same value: no change, but a good poll

        async def recovered() -> bool:
            await watch.evaluate(db)
            told = await _told(db)
            return told[("monitor_failing", "cleared")] + told[("monitor_stale", "cleared")] == 2

        await eventually(recovered, "the monitor to recover")
    finally:
        runner.stop()
        await asyncio.wait_for(running, 30)
    added = await tally.new()
    assert added.pop(("monitor_changed", "event"), 0) == 0  # no new value after recovering
    assert added == {
        ("monitor_failing", "fired"): 1,
        ("monitor_stale", "fired"): 1,
        ("monitor_failing", "cleared"): 1,
        ("monitor_stale", "cleared"): 1,
    }
    for rule_id in watching:  # no runner from here on: the monitor would go stale again
        await admin.set_enabled(db, rule_id, False)

    # A crawl job that spends its page budget; running it again clears the episode.
    job = await start(
        db,
        settings,
        JobSpec(
            name="shop",
            start_urls=(site.url("/shop/"),),
            rules=({"pattern": "http://**/shop/**", "action": "follow", "syntax": "glob"},),
            max_pages=3,
        ),
    )

    async def job_ended() -> bool | None:
        row, _ = await jobs_admin.show(db, job.id)
        return True if row.status != "running" else None

    await run_pool_until(db, settings, job_ended, concurrency=4)
    assert await tally.new() == {("budget_exhausted", "fired"): 1}
    await jobs_admin.rerun(db, settings, job.id)
    await jobs_admin.act(db, job.id, "cancel")
    assert await tally.new() == {("budget_exhausted", "cleared"): 1}

    # Active proxies below the threshold (its only one switched off), then enough again.
    assert await watch.evaluate(db) == 0
    box = SecretBox(settings)
    await update_proxy(db, box, proxy.id, {"is_active": False})
    assert await watch.evaluate(db) == 1
    await update_proxy(db, box, proxy.id, {"is_active": True})
    assert await watch.evaluate(db) == 1
    assert await tally.new() == {("proxies_low", "fired"): 1, ("proxies_low", "cleared"): 1}

    # Every notice reaches the real receiver, signed, saying whether it fired or cleared.
    await Deliverer(db, settings, box).step()
    bodies = [json.loads(r.body) for r in receiver.requests]
    assert Counter((b["event"], _state(b)) for b in bodies) == await _told(db)
    assert {r.headers["x-forager-event"] for r in receiver.requests} == {
        "failure_rate_high", "parse_rate_low", "monitor_changed", "monitor_failing",
        "monitor_stale", "budget_exhausted", "proxies_low",
    }  # fmt: skip
    fail = next(b for b in bodies if b["event"] == "failure_rate_high" and b["state"] == "firing")
    assert (
        fail["batch"] | {"attempts": 2, "failed": 2, "failure_rate_percent": 100.0} == fail["batch"]
    )
    cleared = next(b for b in bodies if b["event"] == "parse_rate_low" and b["state"] == "cleared")
    assert cleared["since"] is not None and cleared["batch"]["parse_success_percent"] == 60.0


async def _has(tally: Tally, key: tuple[str, str]) -> bool:
    return (await tally.new())[key] > 0


@pytest.mark.parametrize(
    ("kind", "values", "field"),
    [
        ("failure_rate_high", {}, "percent"),
        ("proxies_low", {}, "threshold"),
        ("monitor_stale", {"percent": 5.0}, "percent"),
        ("task_failed", {"window_seconds": 60}, "window_seconds"),
        ("budget_exhausted", {"monitor_id": 1}, "monitor_id"),
        ("parse_rate_low", {"percent": 5.0, "domain_id": 1, "batch_name": "b"}, "batch_name"),
    ],
)
def test_an_operational_rule_that_does_not_fit_its_kind_is_refused(
    kind: str, values: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        admin.check(RuleSpec(name="x", kind=kind, webhook_url="http://127.0.0.1:9/", **values))
    assert refused.value.field == field


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the pool's wiring, not SQL
async def test_the_scheduler_of_a_worker_pool_measures_the_rules(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(alert_evaluate_seconds=0.05)
    db = await open_database(settings)
    try:
        await _rule(db, settings, "http://127.0.0.1:9/", "proxies_low", threshold=1)

        async def told() -> Counter[tuple[str, str]] | None:
            return await _told(db) or None

        assert await run_pool_until(db, settings, told) == {("proxies_low", "fired"): 1}
    finally:
        await db.dispose()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the API's shapes
async def test_operational_rules_over_the_api(api: Any) -> None:
    made = await api.post(
        "/api/alerts/rules",
        json={"name": "slow batch", "kind": "failure_rate_high", "percent": 25,
              "window_seconds": 900, "min_attempts": 20, "batch_name": "nightly",
              "webhook_url": "https://hooks.example.com/forager"},
    )  # fmt: skip
    assert made.status_code == 201, made.text
    body = made.json()
    assert (body["kind"], body["percent"], body["window_seconds"], body["min_attempts"]) == (
        "failure_rate_high", 25.0, 900, 20,
    )  # fmt: skip
    for bad, field in (
        ({"kind": "failure_rate_high"}, "percent"),
        ({"kind": "proxies_low", "threshold": "2", "window_seconds": 60}, "window_seconds"),
        ({"kind": "monitor_stale", "window_seconds": 5}, "window_seconds"),  # under 10 s
    ):
        refused = await api.post(
            "/api/alerts/rules",
            json={"name": "x", "webhook_url": "https://hooks.example.com/f", **bad},
        )
        assert refused.status_code == 422, refused.text
        assert [e["field"] for e in refused.json()["errors"]] == [field]
    missing = await api.post(
        "/api/alerts/rules",
        json={"name": "x", "kind": "monitor_failing", "monitor_id": 999,
              "webhook_url": "https://hooks.example.com/f"},
    )  # fmt: skip
    assert missing.status_code == 404, missing.text


def test_people_read_whether_an_episode_fired_or_cleared() -> None:
    from forager.alerts.people import message

    payload = {
        "event": "failure_rate_high",
        "rule": {"id": 1, "name": "nightly"},
        "occurred_at": "2026-11-29T01:00:00+00:00",
        "state": "firing",
        "batch": {"id": "nightly", "failure_rate_percent": 77.5, "attempts": 40},
    }
    title, body = message(payload)
    assert title == "High failure rate"
    assert "failure_rate_percent 77.5" in body and "Rule: nightly" in body
    cleared = {**payload, "state": "cleared", "since": "2026-11-29T00:40:00+00:00"}
    assert message(cleared)[0] == "Cleared: High failure rate"
