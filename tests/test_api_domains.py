"""The domains API on both engines: CRUD, validation, delete refusals, robots.txt, statistics."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from forager.api.deps import Runtime
from forager.db.models import CrawlAttempt, CrawlTask, Product
from forager.queue.door import TaskQueue
from tests.support.crawling import crawl
from tests.support.site import TestSite
from tests.support.waiting import event_details

ROBOTS = "User-agent: *\nCrawl-delay: 3\nDisallow: /private/\n"


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def _create(api: httpx.AsyncClient, name: str, **fields: Any) -> dict[str, Any]:
    response = await api.post("/api/domains", json={"domain_name": name, **fields})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def _submit(api: httpx.AsyncClient, url: str) -> int:
    response = await api.post("/api/tasks", json={"url": url})
    assert response.status_code == 201, response.text
    task_id: int = response.json()["task"]["id"]
    return task_id


async def _domain_id(api: httpx.AsyncClient, name: str) -> int:
    [item] = (await api.get("/api/domains", params={"q": name})).json()["items"]
    domain_id: int = item["id"]
    return domain_id


def _invalid(response: httpx.Response, field: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert field in [e["field"] for e in response.json()["errors"]], response.text


async def test_create_with_defaults_and_get(api: httpx.AsyncClient) -> None:
    settings = _runtime(api).settings
    created = await _create(api, "Shop.Example")
    assert created["domain_name"] == "shop.example"
    assert created["base_url"] == "https://shop.example"
    assert created["parser_name"] == "generic"
    assert created["crawl_delay_seconds"] == settings.default_crawl_delay_seconds
    assert created["max_concurrent_requests"] == settings.default_max_concurrent_requests
    assert created["user_agent"] == settings.user_agent
    assert created["is_active"] is True
    assert created["robots_txt_content"] is None
    assert created["task_counts"]["pending"] == 0
    amazon = await _create(api, "www.amazon.com.br")
    assert amazon["parser_name"] == "amazon"
    got = await api.get(f"/api/domains/{created['id']}")
    assert got.status_code == 200
    assert got.json() == created
    assert await event_details(_runtime(api).db, "domain", created["id"]) == [
        ("created", {"by": "api"})
    ]


async def test_create_with_every_setting(api: httpx.AsyncClient) -> None:
    created = await _create(
        api,
        "shop.example",
        base_url="http://Shop.Example:8080/store/",
        parser_name="amazon",
        crawl_delay_seconds=2.5,
        max_concurrent_requests=3,
        default_crawl_frequency_seconds=3600,
        user_agent="TestBot/1.0",
        is_active=False,
    )
    assert created["base_url"] == "http://shop.example:8080/store"
    assert (created["parser_name"], created["crawl_delay_seconds"]) == ("amazon", 2.5)
    assert (created["max_concurrent_requests"], created["default_crawl_frequency_seconds"]) == (
        3,
        3600,
    )
    assert (created["user_agent"], created["is_active"]) == ("TestBot/1.0", False)


async def test_duplicate_is_409(api: httpx.AsyncClient) -> None:
    await _create(api, "shop.example")
    response = await api.post("/api/domains", json={"domain_name": "SHOP.example"})
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"] == "domain 'shop.example' already exists"
    # A domain created by submitting a URL is a duplicate too.
    await _submit(api, "https://other.example/p/1")
    again = await api.post("/api/domains", json={"domain_name": "other.example"})
    assert again.status_code == 409


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"domain_name": "bad host"}, "domain_name"),
        ({"domain_name": "shop.example:8080"}, "domain_name"),
        ({"domain_name": "https://shop.example"}, "domain_name"),
        ({"domain_name": "-shop.example"}, "domain_name"),
        ({"domain_name": ""}, "domain_name"),
        ({}, "domain_name"),
        ({"domain_name": "a.example", "base_url": "ftp://a.example"}, "base_url"),
        ({"domain_name": "a.example", "base_url": "a.example"}, "base_url"),
        ({"domain_name": "a.example", "parser_name": "nope"}, "parser_name"),
        ({"domain_name": "a.example", "crawl_delay_seconds": -1}, "crawl_delay_seconds"),
        ({"domain_name": "a.example", "crawl_delay_seconds": 3601}, "crawl_delay_seconds"),
        ({"domain_name": "a.example", "max_concurrent_requests": 0}, "max_concurrent_requests"),
        ({"domain_name": "a.example", "max_concurrent_requests": 1001}, "max_concurrent_requests"),
        (
            {"domain_name": "a.example", "default_crawl_frequency_seconds": 59},
            "default_crawl_frequency_seconds",
        ),
        ({"domain_name": "a.example", "user_agent": ""}, "user_agent"),
        ({"domain_name": "a.example", "user_agent": "x" * 256}, "user_agent"),
        ({"domain_name": "a.example", "is_active": None}, "is_active"),
        ({"domain_name": "a.example", "color": "red"}, "color"),
    ],
)
async def test_create_validation(api: httpx.AsyncClient, body: dict[str, Any], field: str) -> None:
    _invalid(await api.post("/api/domains", json=body), field)
    assert (await api.get("/api/domains")).json()["total"] == 0


async def test_list_filters_pagination_and_task_counts(api: httpx.AsyncClient) -> None:
    await _create(api, "a-shop.example")
    await _create(api, "b-shop.example", is_active=False)
    await _create(api, "www.amazon.de")
    for n in range(3):
        await _submit(api, f"https://a-shop.example/p/{n}")
    paused = await _submit(api, "https://www.amazon.de/dp/B0ABC12345")
    await api.post(f"/api/tasks/{paused}/pause")

    page = (await api.get("/api/domains", params={"limit": 2})).json()
    assert (page["total"], page["limit"], page["offset"]) == (3, 2, 0)
    assert [d["domain_name"] for d in page["items"]] == ["a-shop.example", "b-shop.example"]
    assert page["items"][0]["task_counts"]["pending"] == 3
    assert sum(page["items"][1]["task_counts"].values()) == 0
    assert "robots_txt_content" not in page["items"][0]
    rest = (await api.get("/api/domains", params={"limit": 2, "offset": 2})).json()
    [amazon] = rest["items"]
    assert (amazon["domain_name"], amazon["task_counts"]["paused"]) == ("www.amazon.de", 1)

    async def names(**params: Any) -> list[str]:
        body = (await api.get("/api/domains", params=params)).json()
        return [d["domain_name"] for d in body["items"]]

    assert await names(is_active="false") == ["b-shop.example"]
    assert await names(is_active="true") == ["a-shop.example", "www.amazon.de"]
    assert await names(parser_name="amazon") == ["www.amazon.de"]
    assert await names(q="SHOP") == ["a-shop.example", "b-shop.example"]
    assert await names(q="%") == []
    _invalid(await api.get("/api/domains", params={"limit": 0}), "limit")


async def test_update(api: httpx.AsyncClient) -> None:
    created = await _create(api, "shop.example")
    response = await api.patch(
        f"/api/domains/{created['id']}",
        json={
            "crawl_delay_seconds": 1.5,
            "parser_name": "amazon",
            "user_agent": created["user_agent"],
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["crawl_delay_seconds"], body["parser_name"]) == (1.5, "amazon")
    assert body["base_url"] == created["base_url"]  # untouched
    assert (await api.get(f"/api/domains/{created['id']}")).json() == body
    assert (await event_details(_runtime(api).db, "domain", created["id"]))[-1] == (
        "updated",
        {"fields": ["crawl_delay_seconds", "parser_name"]},
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"parser_name": "nope"}, "parser_name"),
        ({"domain_name": "other.example"}, "domain_name"),
        ({"max_concurrent_requests": 0}, "max_concurrent_requests"),
        ({"crawl_delay_seconds": None}, "crawl_delay_seconds"),
        ({"base_url": "mailto:x@y"}, "base_url"),
        ({"unknown": 1}, "unknown"),
    ],
)
async def test_update_validation(api: httpx.AsyncClient, body: dict[str, Any], field: str) -> None:
    created = await _create(api, "shop.example")
    _invalid(await api.patch(f"/api/domains/{created['id']}", json=body), field)
    assert (await api.get(f"/api/domains/{created['id']}")).json() == created


async def test_unknown_domain_is_404(api: httpx.AsyncClient) -> None:
    calls = [
        api.get("/api/domains/999"),
        api.patch("/api/domains/999", json={"is_active": False}),
        api.delete("/api/domains/999"),
        api.post("/api/domains/999/activate"),
        api.post("/api/domains/999/deactivate"),
        api.post("/api/domains/999/refresh-robots"),
        api.get("/api/domains/999/stats"),
    ]
    for call in calls:
        response = await call
        assert response.status_code == 404, response.text
        assert response.json()["detail"] == "domain 999 does not exist"


async def test_delete_is_refused_while_a_task_is_in_flight(api: httpx.AsyncClient) -> None:
    task_id = await _submit(api, "https://shop.example/p/1")
    await _submit(api, "https://shop.example/p/2")
    domain_id = await _domain_id(api, "shop.example")
    runtime = _runtime(api)
    async with runtime.db.session() as session:
        await session.execute(
            update(CrawlTask).where(CrawlTask.id == task_id).values(status="crawling")
        )
    refused = await api.delete(f"/api/domains/{domain_id}")
    assert refused.status_code == 409
    assert refused.headers["content-type"] == "application/problem+json"
    assert "1 task(s) in flight" in refused.json()["detail"]
    assert (await api.get(f"/api/domains/{domain_id}")).status_code == 200

    assert (await api.post(f"/api/tasks/{task_id}/cancel")).status_code == 200
    deleted = await api.delete(f"/api/domains/{domain_id}")
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert (await api.get(f"/api/domains/{domain_id}")).status_code == 404
    async with runtime.db.reader() as session:
        assert await session.scalar(select(func.count()).select_from(CrawlTask)) == 0
    [*_, (event, details)] = await event_details(_runtime(api).db, "domain", domain_id)
    assert (event, details) == ("deleted", {"by": "api", "domain_name": "shop.example", "tasks": 2})


async def test_delete_is_refused_while_a_task_is_claimed(api: httpx.AsyncClient) -> None:
    await _submit(api, "https://shop.example/p/1")
    domain_id = await _domain_id(api, "shop.example")
    runtime = _runtime(api)
    [claimed] = await TaskQueue(runtime.db, runtime.settings).claim("w")
    assert (await api.delete(f"/api/domains/{domain_id}")).status_code == 409
    assert (await api.post(f"/api/tasks/{claimed.id}/pause")).status_code == 200
    assert (await api.delete(f"/api/domains/{domain_id}")).status_code == 204


async def test_deactivated_domains_are_not_claimed(api: httpx.AsyncClient) -> None:
    task_id = await _submit(api, "https://shop.example/p/1")
    domain_id = await _domain_id(api, "shop.example")
    runtime = _runtime(api)
    queue = TaskQueue(runtime.db, runtime.settings)

    off = await api.post(f"/api/domains/{domain_id}/deactivate")
    assert (off.status_code, off.json()["is_active"]) == (200, False)
    assert (await api.post(f"/api/domains/{domain_id}/deactivate")).status_code == 200
    assert await queue.claim("w") == []

    on = await api.post(f"/api/domains/{domain_id}/activate")
    assert (on.status_code, on.json()["is_active"]) == (200, True)
    [claimed] = await queue.claim("w")
    assert claimed.id == task_id
    events = [e for e, _ in await event_details(_runtime(api).db, "domain", domain_id)]
    assert events == ["created", "deactivated", "activated"]  # a repeat changes nothing


async def test_refresh_robots(api: httpx.AsyncClient, site: TestSite) -> None:
    site.set_robots(ROBOTS)
    base = site.url("/").rstrip("/")
    created = await _create(api, "127.0.0.1", base_url=base, crawl_delay_seconds=1)
    response = await api.post(f"/api/domains/{created['id']}/refresh-robots")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["robots_error"] is None
    assert body["robots_txt_url"] == f"{base}/robots.txt"
    assert body["robots_txt_content"] == ROBOTS
    assert body["robots_txt_last_fetched"] is not None
    assert body["crawl_delay_seconds"] == 3
    assert [r.path for r in site.requests()] == ["/robots.txt"]
    assert (await api.get(f"/api/domains/{created['id']}")).json()["crawl_delay_seconds"] == 3
    event, details = (await event_details(_runtime(api).db, "domain", created["id"]))[-1]
    assert event == "robots_refreshed"
    assert details["crawl_delay_seconds"] == {"from": 1.0, "to": 3.0}

    # A larger configured delay is never lowered by robots.txt.
    await api.patch(f"/api/domains/{created['id']}", json={"crawl_delay_seconds": 10})
    again = (await api.post(f"/api/domains/{created['id']}/refresh-robots")).json()
    assert again["crawl_delay_seconds"] == 10


async def test_refresh_robots_missing_file_allows_everything(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    base = site.url("/no-such-dir")
    created = await _create(api, "127.0.0.1", base_url=base)
    body = (await api.post(f"/api/domains/{created['id']}/refresh-robots")).json()
    assert (body["robots_error"], body["robots_txt_content"]) == (None, "")
    assert body["robots_txt_url"] == f"{base}/robots.txt"
    assert body["crawl_delay_seconds"] == created["crawl_delay_seconds"]


async def test_refresh_robots_network_error(api: httpx.AsyncClient, site: TestSite) -> None:
    site.set_robots(ROBOTS)
    created = await _create(api, "127.0.0.1", base_url=site.url("/").rstrip("/"))
    await api.post(f"/api/domains/{created['id']}/refresh-robots")
    fetched = (await api.get(f"/api/domains/{created['id']}")).json()
    await api.patch(f"/api/domains/{created['id']}", json={"base_url": "http://127.0.0.1:1"})
    response = await api.post(f"/api/domains/{created['id']}/refresh-robots")
    assert response.status_code == 200
    body = response.json()
    assert body["robots_error"]
    assert "Connect" in body["robots_error"]
    for key in ("robots_txt_url", "robots_txt_content", "robots_txt_last_fetched"):
        assert body[key] == fetched[key]
    assert (await event_details(_runtime(api).db, "domain", created["id"]))[-1][
        0
    ] == "robots_refresh_failed"


async def test_stats_then_delete_with_products(api: httpx.AsyncClient, site: TestSite) -> None:
    runtime = _runtime(api)
    ids = [await _submit(api, site.url(p)) for p in ("/product/1", "/product/2")]
    ids.append(await _submit(api, site.url("/status/404")))
    await crawl(runtime.db, runtime.settings, ids)
    domain_id = await _domain_id(api, "127.0.0.1")

    response = await api.get(f"/api/domains/{domain_id}/stats")
    assert response.status_code == 200, response.text
    stats = response.json()
    assert stats["domain_id"] == domain_id
    assert (stats["tasks_by_status"]["completed"], stats["tasks_by_status"]["failed"]) == (2, 1)
    assert stats["total_tasks"] == 3
    attempts = stats["attempts_last_24h"]
    # Two pages fetched (and parsed in the same attempt); one fetch failed with a 404.
    assert attempts["by_outcome"] == {"success": 2, "failed": 1}
    assert attempts["by_error_type"] == {"http_4xx": 1}
    assert attempts["total"] == 3
    assert attempts["avg_fetch_response_time_ms"] is not None
    assert attempts["avg_fetch_response_time_ms"] >= 0
    assert stats["products"] == 2
    assert stats["last_completed_at"] is not None
    assert stats["last_completed_at"].endswith(("Z", "+00:00"))

    assert (await api.delete(f"/api/domains/{domain_id}")).status_code == 204
    async with runtime.db.reader() as session:
        for model in (CrawlTask, CrawlAttempt, Product):
            assert await session.scalar(select(func.count()).select_from(model)) == 0
