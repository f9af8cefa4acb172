"""Task queries, bulk restart, statistics and ``/metrics``, through the API on both engines."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from forager.api.deps import Runtime
from forager.db.models import CrawlTask, Domain, Proxy
from forager.db.types import utcnow
from tests.conftest import SettingsFactory
from tests.support.crawling import crawl
from tests.support.site import TestSite


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def _batch(api: httpx.AsyncClient, urls: list[str], **options: Any) -> list[int]:
    response = await api.post("/api/tasks/batch", json={"urls": urls, **options})
    assert response.status_code == 200, response.text
    return [r["task_id"] for r in response.json()["results"]]


async def _ids(api: httpx.AsyncClient, **params: Any) -> list[int]:
    response = await api.get("/api/tasks", params=params)
    assert response.status_code == 200, response.text
    return sorted(t["id"] for t in response.json()["items"])


async def test_task_filters(api: httpx.AsyncClient) -> None:
    high = await _batch(api, ["https://a.example/sale_50%/x", "https://a.example/y"], priority=1)
    low = await _batch(api, ["https://b.example/z"], priority=9, batch_name="nightly")
    assert await _ids(api, min_priority=1, max_priority=5) == high
    assert await _ids(api, min_priority=6) == low
    assert await _ids(api, url_contains="sale_50%") == high[:1]
    assert await _ids(api, url_contains="_") == high[:1]  # LIKE wildcards are literal
    assert await _ids(api, created_by="test-admin") == sorted(high + low)
    assert await _ids(api, created_by="cli") == []
    later = (utcnow() + timedelta(minutes=1)).isoformat()
    assert await _ids(api, created_after=later) == []
    assert await _ids(api, created_before=later) == sorted(high + low)
    assert await _ids(api, batch_name="nightly", domain="b.example") == low
    # An empty range matches nothing (the description cannot relate two parameters).
    empty = await api.get("/api/tasks", params={"min_priority": 7, "max_priority": 2})
    assert (empty.status_code, empty.json()["total"], empty.json()["items"]) == (200, 0, [])
    numeric = await api.get("/api/tasks", params={"created_before": "0.5"})
    assert numeric.status_code == 422  # a number is not a date-time
    naive = await api.get("/api/tasks", params={"created_after": "2026-01-01T00:00:00"})
    assert naive.status_code == 422


async def test_restart_failed_in_bulk_and_stats(api: httpx.AsyncClient, site: TestSite) -> None:
    runtime = _runtime(api)
    ids = await _batch(
        api,
        [site.url("/status/404"), site.url("/status/410"), site.url("/product/3")],
    )
    await crawl(runtime.db, runtime.settings, ids)
    later_failed = await _batch(api, [site.url("/status/404", host="127.0.0.2")])
    await crawl(runtime.db, runtime.settings, later_failed)
    completed = await api.get("/api/tasks", params={"completed_after": "2000-01-01T00:00:00Z"})
    assert completed.json()["total"] == 4

    stats = (await api.get("/api/tasks/stats")).json()
    by_status = {s["status"]: s for s in stats["statuses"]}
    assert by_status["failed"]["count"] == 3
    assert by_status["completed"]["count"] == 1
    # The average duration is the mean of completed_at - started_at over each status's tasks
    # (kept by triggers): the same figure as the tasks' own timestamps give, to the ms shown.
    async with runtime.db.reader() as session:
        rows = (
            await session.execute(
                select(CrawlTask.status, CrawlTask.started_at, CrawlTask.completed_at).where(
                    CrawlTask.id.in_(ids + later_failed)
                )
            )
        ).all()
    durations: dict[str, list[float]] = {}
    for status, started, completed_at in rows:
        assert started is not None and completed_at is not None, (status, started, completed_at)
        durations.setdefault(status, []).append((completed_at - started).total_seconds())
    assert {status: len(d) for status, d in durations.items()} == {"failed": 3, "completed": 1}
    for status, seconds in durations.items():
        mean = sum(seconds) / len(seconds)
        assert by_status[status]["avg_duration_seconds"] == pytest.approx(mean, abs=0.0015)

    domain_id = (await api.get(f"/api/tasks/{later_failed[0]}")).json()["domain_id"]
    only_domain = await api.post("/api/tasks/restart-failed", json={"domain_id": domain_id})
    assert only_domain.json() == {"restarted": 1, "task_ids": later_failed}
    limited = await api.post("/api/tasks/restart-failed", json={"limit": 1})
    assert limited.json()["restarted"] == 1
    rest = await api.post("/api/tasks/restart-failed", json={})
    assert rest.json()["restarted"] == 1
    assert (await api.post("/api/tasks/restart-failed", json={})).json()["restarted"] == 0
    task = (await api.get(f"/api/tasks/{ids[0]}")).json()
    assert (task["status"], task["retry_count"], task["error_type"]) == ("pending", 0, None)
    assert task["events"][-1]["event"] == "restarted"
    bad = await api.post("/api/tasks/restart-failed", json={"limit": 0})
    assert (bad.status_code, bad.json()["errors"][0]["field"]) == (422, "limit")


async def test_restart_failed_respects_failed_after(api: httpx.AsyncClient) -> None:
    runtime = _runtime(api)
    old, new = await _batch(api, ["https://c.example/1", "https://c.example/2"])
    async with runtime.db.session() as session:
        for task_id, when in ((old, utcnow() - timedelta(days=3)), (new, utcnow())):
            await session.execute(
                update(CrawlTask)
                .where(CrawlTask.id == task_id)
                .values(status="failed", completed_at=when, error_type="http_5xx")
            )
    since = (utcnow() - timedelta(days=1)).isoformat()
    response = await api.post("/api/tasks/restart-failed", json={"failed_after": since})
    assert response.json()["task_ids"] == [new]


async def test_metrics(api: httpx.AsyncClient, site: TestSite) -> None:
    runtime = _runtime(api)
    ids = await _batch(
        api, [site.url("/product/1"), site.url("/status/404"), site.url("/product/2")]
    )
    await crawl(runtime.db, runtime.settings, ids)
    async with runtime.db.session() as session:
        session.add_all(
            [Proxy(proxy_url="10.0.0.1", proxy_port=1), Proxy(proxy_url="10.0.0.2", proxy_port=2)]
        )
        await session.flush()
        await session.execute(update(Proxy).where(Proxy.proxy_port == 2).values(is_active=False))
    response = await api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    assert 'forager_tasks{status="completed"} 2' in text
    assert 'forager_tasks{status="failed"} 1' in text
    assert 'forager_attempts_total{phase="fetch",outcome="success",error_type=""} 2' in text
    assert 'forager_attempts_total{phase="fetch",outcome="failed",error_type="http_4xx"} 1' in text
    assert 'forager_fetch_duration_seconds_bucket{le="+Inf"} 2' in text
    assert "forager_fetch_duration_seconds_count 2" in text
    assert 'forager_proxies{state="active"} 1' in text
    assert 'forager_proxies{state="disabled"} 1' in text
    assert "# TYPE forager_fetch_duration_seconds histogram" in text
    buckets = [
        int(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("forager_fetch_duration_seconds_bucket")
    ]
    assert buckets == sorted(buckets)  # cumulative


async def test_health_reports_workers_and_degrades_without_them(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = _runtime(api)
    await _batch(api, ["https://nobody.example/1"])
    health = (await api.get("/health")).json()
    # The test app runs no workers: work is due and nobody takes it.
    assert (health["status"], health["due_tasks"], health["workers"]) == ("degraded", 1, [])
    assert "no worker" in health["detail"]
    await api.post("/api/tasks/1/cancel")
    ids = await _batch(api, [site.url("/product/4")])
    await crawl(runtime.db, runtime.settings, ids)  # a real pool reports on start and on stop
    health = (await api.get("/health")).json()
    assert (health["status"], health["due_tasks"]) == ("healthy", 0)
    assert health["workers"] == []  # it has stopped since
    from forager.worker import presence

    await presence.report(
        runtime.db, "host:1:worker:abc", kind="worker", concurrency=8, in_flight=2, processed=5
    )
    [worker] = (await api.get("/health")).json()["workers"]
    assert (worker["id"], worker["in_flight"], worker["processed"]) == ("host:1:worker:abc", 2, 5)


async def test_stats_summary(api: httpx.AsyncClient, site: TestSite) -> None:
    runtime = _runtime(api)
    ids = await _batch(api, [site.url("/product/6"), site.url("/status/404")])
    await crawl(runtime.db, runtime.settings, ids)
    stats = (await api.get("/api/stats")).json()
    assert stats["tasks_by_status"] == {"completed": 1, "failed": 1}
    assert stats["products"] == 1
    assert stats["domains"] == {"true": 1}
    assert stats["fetches_last_hour"] == {"success": 1, "failed": 1}
    assert stats["errors_last_hour"] == {"http_4xx": 1}
    read = {"Authorization": f"Bearer {api.keys['read']}"}  # type: ignore[attr-defined]
    assert (await api.get("/api/stats", headers=read)).status_code == 200
    assert (await api.get("/api/stats", headers={"Authorization": ""})).status_code == 401


async def _seen_everywhere(api: httpx.AsyncClient) -> list[str]:
    """Real proxies, open breakers and workers; the host names, ports and ids they carry."""
    runtime = _runtime(api)
    await _batch(api, ["https://secret-shop.example/p/1"])
    async with runtime.db.session() as session:
        proxy = Proxy(proxy_url="proxy-host.internal", proxy_port=3128)
        session.add(proxy)
        await session.flush()
        opened = {"breaker_state": "open", "breaker_opened_at": utcnow()}
        await session.execute(update(Proxy).values(**opened))
        await session.execute(update(Domain).values(**opened))
    from forager.worker import presence

    worker_id = "build-box-7:4242:worker:abc"
    await presence.report(
        runtime.db, worker_id, kind="worker", concurrency=8, in_flight=1, processed=3
    )
    return ["proxy-host.internal", "3128", "secret-shop.example", "build-box-7", "4242"]


async def test_anonymous_health_and_metrics_show_no_host_port_or_worker(
    api: httpx.AsyncClient,
) -> None:
    secrets = await _seen_everywhere(api)
    anonymous = {"Authorization": ""}
    health = await api.get("/health", headers=anonymous)
    assert health.status_code == 200
    body = health.json()
    assert set(body) == {"status", "timestamp", "opt_outs"}
    assert (body["status"], body["opt_outs"]) == ("healthy", [])
    metrics = await api.get("/metrics", headers=anonymous)
    assert 'forager_circuit_breaker_state{kind="proxy",id="1"} 1' in metrics.text
    assert 'forager_circuit_breaker_state{kind="domain",id="1"} 1' in metrics.text
    for text in (health.text, metrics.text):
        assert not [s for s in secrets if s in text], text

    # A valid key (Bearer, or a read key) sees the whole picture; a wrong one does not.
    for headers in ({}, {"Authorization": f"Bearer {api.keys['read']}"}):  # type: ignore[attr-defined]
        full = (await api.get("/health", headers=headers)).json()
        assert full["queue_depth"] == {"pending": 1}
        assert [w["id"] for w in full["workers"]] == ["build-box-7:4242:worker:abc"]
        assert {b["name"] for b in full["circuit_breakers"]} == {
            "secret-shop.example",
            "proxy-host.internal:3128",
        }
    wrong = await api.get("/health", headers={"Authorization": "Bearer fgr_nope"})
    assert set(wrong.json()) == {"status", "timestamp", "opt_outs"}


async def test_health_names_safety_opt_outs(make_settings: SettingsFactory) -> None:
    from forager.app import create_app

    app = create_app(make_settings(serve_workers=0, browser_no_sandbox=True))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://forager.test") as c:
            body = (await c.get("/health")).json()
    assert body["opt_outs"] == ["browser_no_sandbox"]
