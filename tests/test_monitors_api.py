"""``/api/monitors``, the data endpoint's freshness, and monitors in ``/health`` and
``/metrics`` (issue 15), on both engines, with a monitor runner in the test process."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from forager.apikeys import create_key
from forager.app import create_app
from forager.monitors.runner import MonitorRunner
from tests.conftest import SettingsFactory
from tests.support.site import TestSite
from tests.support.waiting import event_rows, eventually

FAST = {
    "serve_workers": 0,  # no built-in runner: the tests start one when they want it
    "monitor_claim_seconds": 0.1,
    "monitor_lease_seconds": 3.0,
    "monitor_interval_seconds": 0.1,
    "monitor_min_interval_seconds": 0.05,
    "monitor_max_interval_seconds": 0.3,
    "monitor_degraded_seconds": 1.0,
    "monitor_staleness_seconds": 2.0,
    "monitor_retry_base_seconds": 0.05,
    "monitor_retry_max_seconds": 0.1,
}


class Client(httpx.AsyncClient):
    app: Any
    keys: dict[str, str]
    runner_task: asyncio.Task[None] | None = None
    runner: MonitorRunner | None = None

    def start_runner(self) -> MonitorRunner:
        runtime = self.app.state.runtime
        self.runner = MonitorRunner(
            runtime.db,
            runtime.settings,
            runtime.parts.fetchers,
            runtime.parts.parser,
            owner="test-runner",
        )
        self.runner_task = asyncio.create_task(self.runner.run())
        return self.runner


@pytest.fixture
async def mapi(make_settings: SettingsFactory) -> AsyncIterator[Client]:
    app = create_app(make_settings(**FAST))
    async with app.router.lifespan_context(app):
        db = app.state.runtime.db
        keys = {role: (await create_key(db, f"test-{role}", role))[1] for role in ("admin", "read")}
        async with Client(
            transport=httpx.ASGITransport(app=app),
            base_url="http://forager.test",
            headers={"Authorization": f"Bearer {keys['admin']}"},
        ) as client:
            client.app, client.keys = app, keys
            try:
                yield client
            finally:
                if client.runner is not None and client.runner_task is not None:
                    client.runner.stop()
                    await asyncio.wait_for(client.runner_task, 30)


def _json_monitor(site: TestSite, key: str, **extra: Any) -> dict[str, Any]:
    return {"url": site.url(f"/live/{key}"), "json_paths": {"value": "nested.value"}, **extra}


async def test_create_list_get_pause_resume_delete_with_audit(mapi: Client, site: TestSite) -> None:
    created = await mapi.post("/api/monitors", json=_json_monitor(site, "a", name="score"))
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["status"] == "stopped" and body["running"] is False  # nobody runs it yet
    assert (body["interval_seconds"], body["selector_type"]) == (0.1, "json")
    assert body["min_interval_seconds"] == 0.05 and body["max_interval_seconds"] == 0.3
    mid = body["id"]

    listed = (await mapi.get("/api/monitors")).json()
    assert listed["total"] == 1 and listed["items"][0]["id"] == mid
    assert (await mapi.get(f"/api/monitors/{mid}")).json()["name"] == "score"

    paused = (await mapi.post(f"/api/monitors/{mid}/pause")).json()
    assert (paused["status"], paused["enabled"]) == ("paused", False)
    assert (await mapi.get("/api/monitors", params={"status": "paused"})).json()["total"] == 1
    resumed = (await mapi.post(f"/api/monitors/{mid}/resume")).json()
    assert (resumed["status"], resumed["enabled"]) == ("stopped", True)

    read = {"Authorization": f"Bearer {mapi.keys['read']}"}
    assert (await mapi.get(f"/api/monitors/{mid}", headers=read)).status_code == 200
    assert (await mapi.post(f"/api/monitors/{mid}/pause", headers=read)).status_code == 403
    assert (await mapi.delete(f"/api/monitors/{mid}", headers=read)).status_code == 403
    assert (await mapi.delete(f"/api/monitors/{mid}")).status_code == 204
    assert (await mapi.get(f"/api/monitors/{mid}")).status_code == 404
    assert (await mapi.delete(f"/api/monitors/{mid}")).status_code == 404

    rows = await event_rows(mapi.app.state.runtime.db, "monitor", mid)
    assert [(e.event, e.actor) for e in rows] == [
        ("created", "test-admin"),
        ("paused", "test-admin"),
        ("resumed", "test-admin"),
        ("deleted", "test-admin"),
    ]


BAD_INPUT = [
    ({"url": "ftp://x.example/"}, "url"),
    ({"json_paths": {"v": "a..b"}}, "json_paths"),
    ({"json_paths": {"_metadata": "a"}}, "json_paths"),
    ({"css": {"v": "a["}, "json_paths": None}, "css"),
    ({"json_paths": None}, "parser_name"),
    ({"parser_name": "nope", "json_paths": None}, "parser_name"),
    ({"css": {"v": "#x"}}, "css"),
    ({"fetcher": "telnet"}, "fetcher"),
    ({"interval_seconds": 0.01}, "interval_seconds"),
    ({"max_interval_seconds": 5}, "max_interval_seconds"),  # not below the 1 s degraded
    ({"surprise": 1}, "surprise"),
    ({"end_states": ["ended"]}, "end_states"),  # without a state_field
]


async def test_bad_input_is_refused_naming_the_field(mapi: Client, site: TestSite) -> None:
    for body, field in BAD_INPUT:
        response = await mapi.post("/api/monitors", json={**_json_monitor(site, "b"), **body})
        assert response.status_code == 422, (body, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
        fields = [e["field"].split(".")[0] for e in response.json()["errors"]]
        assert fields == [field], body
    assert (await mapi.get("/api/monitors")).json()["total"] == 0  # nothing half-written


async def test_data_endpoint_history_metrics_and_health(mapi: Client, site: TestSite) -> None:
    site.set_live("d", 7)
    mid = (await mapi.post("/api/monitors", json=_json_monitor(site, "d"))).json()["id"]
    assert (await mapi.get(f"/api/monitors/{mid}/data")).status_code == 409  # no data yet
    assert (await mapi.get("/api/monitors/999999/data")).status_code == 404
    # Enabled but nobody runs it: no active scraper while a monitor is enabled is down (the
    # seed's rule), 503; anonymous callers learn only that.
    anonymous = await mapi.get("/health", headers={"Authorization": ""})
    assert anonymous.status_code == 503 and anonymous.json()["status"] == "down"
    assert set(anonymous.json()) == {"status", "timestamp", "opt_outs"}
    full = (await mapi.get("/health")).json()
    assert (full["queue"]["status"], full["monitors"]["status"]) == ("healthy", "down")

    mapi.start_runner()

    async def data() -> httpx.Response | None:
        response = await mapi.get(f"/api/monitors/{mid}/data")
        return response if response.status_code == 200 else None

    response = await eventually(data, "the first snapshot")
    body = response.json()
    meta = body.pop("_metadata")
    assert body == {"value": 7}
    assert meta["monitor_id"] == mid and meta["source"] == "scraper" and meta["scraper_id"]
    assert response.headers["X-Data-Freshness"] == meta["scraped_at"]
    assert meta["scraped_at"].endswith("Z")
    assert int(response.headers["X-Data-Age-Seconds"]) == meta["data_age_seconds"] >= 0

    site.set_live("d", 8)

    async def two_changes() -> list[Any] | None:
        rows = (await mapi.get(f"/api/monitors/{mid}/history")).json()
        return rows if len(rows) == 2 else None

    history = await eventually(two_changes, "the change in the history")
    assert [h["data"]["value"] for h in history] == [8, 7]  # newest first
    # Each change says what differs from the one before; the first, every field it had.
    assert [h["changes"] for h in history] == [
        [{"field": "value", "kind": "changed", "before": 7, "after": 8}],
        [{"field": "value", "kind": "added", "before": None, "after": 7}],
    ]
    [newest] = (await mapi.get(f"/api/monitors/{mid}/history", params={"limit": 1})).json()
    assert newest["changes"] == history[0]["changes"]  # the one before is read, not shown

    async def healthy() -> dict[str, Any] | None:
        health = await mapi.get("/health")
        full = health.json()
        statuses = (full["status"], full["monitors"]["status"], full["queue"]["status"])
        return full if health.status_code == 200 and statuses == ("healthy",) * 3 else None

    # A poll a loaded machine ran late reads as degraded for a moment (1 s here): healthy is
    # where it settles.
    full = await eventually(healthy, "a healthy /health")
    assert full["active_scraper_count"] == 1 and full["total_matches_scraping"] == 1
    [scraper] = full["scrapers"]
    assert scraper["monitor_id"] == mid and scraper["health_status"] == "healthy"
    assert scraper["total_updates"] >= 2 and scraper["memory_mb"] > 0
    assert set(full["resources"]) == {
        "total_memory_mb",
        "average_memory_mb",
        "peak_memory_mb",
        "total_cpu_percent",
        "dropped_snapshots",
    }
    assert full["errors"]["last_minute"] == 0
    [breaker] = [b for b in full["errors"]["circuit_breakers"] if b["kind"] == "monitor"]
    assert (breaker["entity_id"], breaker["state"]) == (mid, "closed")
    assert breaker["total_successes"] >= 2 and breaker["total_failures"] == 0
    assert full["performance"]["updates_per_minute"] > 0

    metrics = (await mapi.get("/metrics")).text
    assert f'forager_monitor_updates_total{{monitor="{mid}"}}' in metrics
    assert f'forager_monitor_breaker_state{{monitor="{mid}"}} 0' in metrics
    assert "forager_active_scrapers 1" in metrics
    polls = re.search(r"forager_monitor_poll_duration_seconds_count (\d+)", metrics)
    assert polls is not None and int(polls.group(1)) >= 2  # the seed's latency histogram
    assert 'forager_monitor_poll_duration_seconds_bucket{le="+Inf"}' in metrics
    assert "127.0.0.1" not in metrics and "/live/" not in metrics  # ids only


async def test_forced_staleness_degrades_health_then_recovers(mapi: Client, site: TestSite) -> None:
    mid = (
        await mapi.post(
            "/api/monitors", json={"url": site.url("/hold/stale"), "parser_name": "generic"}
        )
    ).json()["id"]
    mapi.start_runner()
    await eventually(lambda: site.held("stale") == 1, "a poll waiting on the page")

    async def health_is(status: str) -> dict[str, Any] | None:
        body = (await mapi.get("/health")).json()
        return body if body["status"] == status else None

    # No successful poll for over FORAGER_MONITOR_STALENESS_SECONDS (2 s here): failing.
    stale = await eventually(lambda: _failing(mapi), "the monitor to go stale")
    assert stale["monitors"]["status"] == "degraded" and stale["status"] == "degraded"
    assert (await mapi.get(f"/api/monitors/{mid}")).json()["status"] == "stale"
    site.release("stale")
    healthy = await eventually(lambda: health_is("healthy"), "health after the page answers")
    assert healthy["scrapers"][0]["health_status"] == "healthy"
    assert (await mapi.get(f"/api/monitors/{mid}")).json()["status"] == "active"


async def _failing(mapi: Client) -> dict[str, Any] | None:
    body = (await mapi.get("/health")).json()
    scrapers = body.get("scrapers") or []
    return body if scrapers and scrapers[0]["health_status"] == "failing" else None


async def test_unresolved_errors_are_listed_and_resolved_by_hand(
    mapi: Client, site: TestSite
) -> None:
    site.set_live("e", 1, status=500)
    mid = (await mapi.post("/api/monitors", json=_json_monitor(site, "e"))).json()["id"]
    mapi.start_runner()

    async def unresolved() -> list[dict[str, Any]] | None:
        page = (
            await mapi.get("/api/monitor-errors", params={"resolved": "false", "monitor_id": mid})
        ).json()
        return page["items"] or None

    first = (await eventually(unresolved, "an unresolved error"))[-1]
    assert (first["category"], first["error_type"], first["resolved"]) == (
        "network",
        "http_5xx",
        False,
    )
    await mapi.post(f"/api/monitors/{mid}/pause")  # no more errors from here on
    read = {"Authorization": f"Bearer {mapi.keys['read']}"}
    refused = await mapi.post(f"/api/monitor-errors/{first['id']}/resolve", headers=read)
    assert refused.status_code == 403
    done = (await mapi.post(f"/api/monitor-errors/{first['id']}/resolve")).json()
    assert (done["resolved"], done["resolution_method"]) == (True, "manual")
    again = (await mapi.post(f"/api/monitor-errors/{first['id']}/resolve")).json()
    assert again["resolution_time"] == done["resolution_time"]  # resolving twice: no change
    assert (await mapi.post("/api/monitor-errors/999999/resolve")).status_code == 404
    resolved = (await mapi.get("/api/monitor-errors", params={"resolved": "true"})).json()
    assert [e["id"] for e in resolved["items"]] == [first["id"]]
    rows = await event_rows(mapi.app.state.runtime.db, "scraper_error", first["id"])
    assert [(e.event, e.actor) for e in rows] == [("resolved", "test-admin")]


async def test_health_check_can_be_turned_off(make_settings: SettingsFactory) -> None:
    app = create_app(make_settings(serve_workers=0, health_check_enabled=False))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://forager.test"
        ) as client,
    ):
        response = await client.get("/health")
        assert response.status_code == 404
        assert "FORAGER_HEALTH_CHECK_ENABLED" in response.json()["detail"]


async def test_metrics_on_their_own_port(make_settings: SettingsFactory) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = create_app(make_settings(serve_workers=0, prometheus_port=port))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://forager.test"
        ) as client,
    ):
        assert (await client.get("/metrics")).status_code == 404  # not on the API's port
        async with httpx.AsyncClient() as outside:
            response = await outside.get(f"http://127.0.0.1:{port}/metrics")
        assert response.status_code == 200
        assert "forager_active_scrapers 0" in response.text
