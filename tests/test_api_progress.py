"""``/api/progress`` on both engines: a batch's and the queue's counts, rate and estimated end,
and each domain's wait read from the real state that causes it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from forager.api.deps import Runtime
from forager.worker.presence import report
from tests.support.crawling import crawl
from tests.support.site import TestSite


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def _progress(api: httpx.AsyncClient, **params: str) -> dict[str, Any]:
    response = await api.get("/api/progress", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _submit(api: httpx.AsyncClient, urls: list[str], **options: Any) -> list[int]:
    response = await api.post("/api/tasks/batch", json={"urls": urls, **options})
    assert response.status_code in (200, 201), response.text
    return [r["task_id"] for r in response.json()["results"]]


async def _domain(api: httpx.AsyncClient, site: TestSite, **fields: Any) -> int:
    base = site.url("/").rstrip("/")
    response = await api.post("/api/domains", json={"domain_name": "127.0.0.1", "base_url": base})
    assert response.status_code == 201, response.text
    domain_id: int = response.json()["id"]
    if fields:
        patched = await api.patch(f"/api/domains/{domain_id}", json=fields)
        assert patched.status_code == 200, patched.text
    return domain_id


async def test_a_batch_shows_its_progress_estimated_end_and_why_it_waits(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = _runtime(api)
    await _domain(api, site, crawl_delay_seconds=1)
    ids = await _submit(api, [site.url(f"/product/{n}") for n in range(1, 5)], batch_name="shop")
    await _submit(api, [site.url("/product/50")])  # another batch's task: not counted in it

    body = await _progress(api, batch_name="shop")
    assert (body["total"], body["done"], body["remaining"]) == (4, 0, 4)
    assert (body["rate_per_minute"], body["estimated_end"]) == (None, None)
    [wait] = body["domains"]
    # This app runs no worker: that, not the crawl delay, is what holds the batch now.
    assert (wait["domain"], wait["reason"], wait["pending"]) == ("127.0.0.1", "no_worker", 4)

    await crawl(runtime.db, runtime.settings, ids[:2])
    await report(runtime.db, "serve-1", kind="serve", concurrency=4, in_flight=0, processed=2)
    body = await _progress(api, batch_name="shop")
    assert (body["total"], body["done"], body["remaining"]) == (4, 2, 2)
    assert body["by_status"] == {"completed": 2, "pending": 2}
    assert body["finished_recently"] == 2 and body["rate_per_minute"] > 0
    assert datetime.fromisoformat(body["estimated_end"]) > datetime.now(UTC)
    [wait] = body["domains"]
    assert wait["reason"] == "crawl_delay"
    assert wait["message"] == "crawl delay 1 s per domain → at most 1 page/s; 2 pending"
    assert wait["max_pages_per_second"] == 1.0

    whole = await _progress(api)
    assert (whole["batch_name"], whole["total"], whole["remaining"]) == (None, 5, 3)
    assert whole["domains"][0]["pending"] == 3


async def test_robots_crawl_delay_and_a_missing_proxy_are_named(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = _runtime(api)
    site.set_robots("User-agent: *\nCrawl-delay: 6\n")
    domain_id = await _domain(api, site, crawl_delay_seconds=1)
    refreshed = await api.post(f"/api/domains/{domain_id}/refresh-robots")
    assert refreshed.json()["crawl_delay_seconds"] == 6
    await _submit(api, [site.url("/product/7")])
    await report(runtime.db, "serve-1", kind="serve", concurrency=4, in_flight=0, processed=0)
    [wait] = (await _progress(api))["domains"]
    assert wait["reason"] == "robots_crawl_delay"
    assert wait["message"] == (
        "robots.txt Crawl-delay 6 s per domain → at most 10 pages/min; 1 pending"
    )

    await api.patch(f"/api/domains/{domain_id}", json={"use_global_pool": True})
    [wait] = (await _progress(api))["domains"]
    assert (wait["reason"], wait["max_pages_per_second"]) == ("no_proxy", 0.0)
    added = await api.post("/api/proxies", json={"proxy_url": "127.0.0.1", "proxy_port": 9})
    assert added.status_code == 201, added.text
    [wait] = (await _progress(api))["domains"]
    assert wait["reason"] == "robots_crawl_delay"


@pytest.mark.parametrize("api_settings", [{"breaker_failure_threshold": 1}])
async def test_an_open_breaker_and_an_agent_that_is_not_connected(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = _runtime(api)
    await _domain(api, site)
    created = await api.post("/api/agents", json={"name": "home"})
    assert created.status_code == 201, created.text
    failing = await _submit(api, [site.url("/status/500")], max_retries=0)
    [wait] = (await _progress(api))["domains"]
    assert (wait["reason"], wait["pending"]) == ("no_agent", 1)
    assert "none of the 1 agents is connected" in wait["message"]

    await crawl(runtime.db, runtime.settings, failing)  # a server error opens the breaker
    await _submit(api, [site.url("/product/8")])
    await report(runtime.db, "serve-1", kind="serve", concurrency=4, in_flight=0, processed=1)
    [wait] = (await _progress(api))["domains"]
    assert (wait["reason"], wait["pending"]) == ("breaker_open", 1)
    assert "circuit breaker open after repeated failures" in wait["message"]
