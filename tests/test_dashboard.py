"""The dashboard's server side over plain HTTP: pages, login sessions, CSRF, the stored-page
viewer, /api/events and the shared live publisher. The browser tests are in
test_dashboard_e2e.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from forager.db.models import CrawlTask, Event, PriceHistory, Product
from forager.web.live import Publisher
from forager.web.router import publisher


def _app(api: httpx.AsyncClient) -> Any:
    return api.app  # type: ignore[attr-defined]


def _keys(api: httpx.AsyncClient) -> dict[str, str]:
    keys: dict[str, str] = api.keys  # type: ignore[attr-defined]
    return keys


@pytest.fixture
async def browser(api: httpx.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """A client like a browser: no Authorization header, keeps cookies."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=_app(api)), base_url="http://forager.test"
    ) as client:
        yield client


async def _login(client: httpx.AsyncClient, key: str) -> dict[str, Any]:
    response = await client.post("/ui/login", json={"key": key})
    assert response.status_code == 200, response.text
    who: dict[str, Any] = response.json()
    return who


async def _task(api: httpx.AsyncClient, url: str = "https://shop.example/p/1") -> int:
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    response = await api.post("/api/tasks", json={"url": url, "scheduled_at": later})
    task_id: int = response.json()["task"]["id"]
    return task_id


async def test_pages_are_served_with_a_strict_policy(browser: httpx.AsyncClient) -> None:
    for path in ("/", "/tasks", "/tasks/12", "/products/3", "/events", "/login"):
        response = await browser.get(path)
        assert response.status_code == 200, path
        assert 'src="/ui/static/app.js"' in response.text
        csp = response.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    script = await browser.get("/ui/static/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    # Everything the shell loads is local: no absolute URL to another host.
    for name in ("index.html", "app.js", "lib.js", "app.css"):
        text = (await browser.get(f"/ui/static/{name}")).text
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text
    assert (await browser.get("/tasks/0")).status_code == 422


async def test_login_sets_a_signed_http_only_cookie_not_the_key(
    api: httpx.AsyncClient, browser: httpx.AsyncClient
) -> None:
    admin = _keys(api)["admin"]
    assert (await browser.get("/ui/session")).status_code == 401
    assert (await browser.get("/api/tasks")).status_code == 401
    bad = await browser.post("/ui/login", json={"key": "fgr_nope"})
    assert bad.status_code == 401
    # A form on another site cannot log a browser in: only a JSON body is read.
    for kind in ("text/plain", "application/x-www-form-urlencoded"):
        body = json.dumps({"key": admin}) if kind == "text/plain" else f"key={admin}"
        forged = await browser.post("/ui/login", content=body, headers={"content-type": kind})
        assert forged.status_code == 422 and "forager_session" not in browser.cookies
    response = await browser.post("/ui/login", json={"key": admin})
    cookie = response.headers["set-cookie"]
    assert "forager_session=" in cookie
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert admin not in cookie and admin[4:20] not in cookie
    who = response.json()
    assert (who["name"], who["role"]) == ("test-admin", "admin")
    has_agents = "/api/agents" in _app(api).openapi()["paths"]
    assert who["features"] == {"agents": has_agents}
    assert (await browser.get("/ui/session")).json()["csrf_token"] == who["csrf_token"]
    assert (await browser.get("/api/tasks")).status_code == 200
    # A forged or tampered cookie is refused.
    value = browser.cookies["forager_session"]
    key_id, expires, nonce, sig = value.split(".")
    for forged in (f"{int(key_id) + 1}.{expires}.{nonce}.{sig}", f"{key_id}.{expires}.{nonce}.0"):
        browser.cookies.clear()
        browser.cookies.set("forager_session", forged)
        assert (await browser.get("/api/tasks")).status_code == 401
    browser.cookies.clear()
    browser.cookies.set("forager_session", value)
    assert (await browser.get("/api/tasks")).status_code == 200


async def test_state_changes_need_the_csrf_token(
    api: httpx.AsyncClient, browser: httpx.AsyncClient
) -> None:
    task_id = await _task(api)
    who = await _login(browser, _keys(api)["admin"])
    for headers in ({}, {"X-CSRF-Token": "wrong"}, {"X-CSRF-Token": ""}):
        response = await browser.post(f"/api/tasks/{task_id}/pause", headers=headers)
        assert response.status_code == 403, response.text
        assert "CSRF" in response.json()["detail"]
    refused = await browser.post("/api/tasks", json={"url": "https://shop.example/p/9"})
    assert refused.status_code == 403
    assert (await api.get(f"/api/tasks/{task_id}")).json()["status"] == "pending"
    assert (await api.get("/api/tasks")).json()["total"] == 1
    token = {"X-CSRF-Token": who["csrf_token"]}
    paused = await browser.post(f"/api/tasks/{task_id}/pause", headers=token)
    assert paused.status_code == 200 and paused.json()["status"] == "paused"
    # Bearer requests are unchanged: no CSRF token needed.
    assert (await api.post(f"/api/tasks/{task_id}/resume")).json()["status"] == "pending"


async def test_read_key_session_cannot_change_anything(
    api: httpx.AsyncClient, browser: httpx.AsyncClient
) -> None:
    task_id = await _task(api)
    who = await _login(browser, _keys(api)["read"])
    assert who["role"] == "read"
    assert (await browser.get(f"/api/tasks/{task_id}")).status_code == 200
    token = {"X-CSRF-Token": who["csrf_token"]}
    response = await browser.post(f"/api/tasks/{task_id}/pause", headers=token)
    assert response.status_code == 403 and "read-only" in response.json()["detail"]
    assert (await api.get(f"/api/tasks/{task_id}")).json()["status"] == "pending"
    # …but it may log itself out.
    assert (await browser.post("/ui/logout", headers=token)).status_code == 200


async def test_logout_and_revocation_end_the_session(
    api: httpx.AsyncClient, browser: httpx.AsyncClient
) -> None:
    from forager.apikeys import revoke_key

    who = await _login(browser, _keys(api)["admin"])
    cookie = browser.cookies["forager_session"]
    assert (await browser.post("/ui/logout")).status_code == 403  # CSRF-checked too
    assert (
        await browser.post("/ui/logout", headers={"X-CSRF-Token": who["csrf_token"]})
    ).status_code == 200
    browser.cookies.clear()
    browser.cookies.set("forager_session", cookie)  # replaying the old cookie
    assert (await browser.get("/api/tasks")).status_code == 401
    browser.cookies.clear()
    await _login(browser, _keys(api)["read"])
    assert (await browser.get("/api/tasks")).status_code == 200
    await revoke_key(_app(api).state.runtime.db, "test-read")
    assert (await browser.get("/api/tasks")).status_code == 401


async def test_logout_survives_a_restart(
    api: httpx.AsyncClient, browser: httpx.AsyncClient
) -> None:
    from forager.app import create_app

    who = await _login(browser, _keys(api)["admin"])
    cookie = browser.cookies["forager_session"]
    token = {"X-CSRF-Token": who["csrf_token"]}
    assert (await browser.post("/ui/logout", headers=token)).status_code == 200
    # A new server process on the same database and secret key: the logout still holds,
    # while a session that did not log out goes on working there.
    other = await _login(browser, _keys(api)["admin"])
    assert other["csrf_token"] != who["csrf_token"]
    live_cookie = browser.cookies["forager_session"]
    restarted = create_app(_app(api).state.runtime.settings)
    async with restarted.router.lifespan_context(restarted):
        transport = httpx.ASGITransport(app=restarted)
        async with httpx.AsyncClient(transport=transport, base_url="http://forager.test") as new:
            new.cookies.set("forager_session", cookie)
            assert (await new.get("/api/tasks")).status_code == 401
            new.cookies.set("forager_session", live_cookie)
            assert (await new.get("/api/tasks")).status_code == 200


async def test_stored_page_is_sandboxed(api: httpx.AsyncClient) -> None:
    from forager.store.pages import LocalPageStore

    runtime = _app(api).state.runtime
    task_id = await _task(api)
    assert (await api.get(f"/ui/tasks/{task_id}/page")).status_code == 404
    html = b"<html><body><h1>Stored</h1><script>alert(1)</script></body></html>"
    key = await LocalPageStore(runtime.settings.pages_dir).put("ab" * 32, html)
    async with runtime.db.session() as session:
        await session.execute(
            update(CrawlTask).where(CrawlTask.id == task_id).values(html_path=key)
        )
    response = await api.get(f"/ui/tasks/{task_id}/page")
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.status_code == 200 and "<h1>Stored</h1>" in response.text
    csp = response.headers["content-security-policy"]
    assert csp.startswith("sandbox;") and "default-src 'none'" in csp
    assert "script-src" not in csp  # so scripts fall back to 'none'
    assert (await api.get("/ui/tasks/999/page")).status_code == 404
    read = {"Authorization": f"Bearer {_keys(api)['read']}"}
    assert (await api.get(f"/ui/tasks/{task_id}/page", headers=read)).status_code == 200
    assert (
        await api.get(f"/ui/tasks/{task_id}/page", headers={"Authorization": ""})
    ).status_code == 401


async def test_events_list_filters_and_pages(api: httpx.AsyncClient) -> None:
    first = await _task(api, "https://shop.example/p/1")
    second = await _task(api, "https://shop.example/p/2")
    await api.post(f"/api/tasks/{first}/pause")
    await api.post(f"/api/tasks/{first}/resume")
    everything = (await api.get("/api/events")).json()
    assert everything["total"] >= 4
    ids = [e["id"] for e in everything["items"]]
    assert ids == sorted(ids, reverse=True)
    mine = (await api.get(f"/api/events?entity_type=task&entity_id={first}")).json()
    assert [e["event"] for e in mine["items"]][:2] == ["resumed", "paused"]
    assert {e["entity_id"] for e in mine["items"]} == {str(first)}
    paused = (await api.get("/api/events?event=paused")).json()
    assert [(e["entity_type"], e["entity_id"]) for e in paused["items"]] == [("task", str(first))]
    page = (await api.get(f"/api/events?entity_type=task&entity_id={second}&limit=1")).json()
    assert page["limit"] == 1 and len(page["items"]) == 1
    assert (await api.get("/api/events?limit=0")).status_code == 422
    assert (await api.get("/api/events?entity_type=" + "x" * 31)).status_code == 422
    assert (await api.get("/api/events", headers={"Authorization": ""})).status_code == 401


async def test_previous_prices_and_task_product(api: httpx.AsyncClient) -> None:
    from decimal import Decimal

    runtime = _app(api).state.runtime
    task_id = await _task(api, "https://shop.example/p/7")
    async with runtime.db.session() as session:
        task = await session.get(CrawlTask, task_id)
        assert task is not None
        product = Product(
            domain_id=task.domain_id,
            crawl_task_id=task_id,
            url=task.url,
            url_hash=task.url_hash,
            product_name="Seven",
            price=Decimal("9.00"),
            parser_name="generic",
            parser_version="1",
            content_hash="x",
        )
        session.add(product)
        await session.flush()
        base = datetime.now(UTC)
        for minutes, price in ((0, "12.00"), (1, "10.00"), (2, "9.00")):
            session.add(
                PriceHistory(
                    product_id=product.id,
                    price=Decimal(price),
                    recorded_at=base + timedelta(minutes=minutes),
                )
            )
        product_id = product.id
    found = (await api.get(f"/ui/tasks/{task_id}/product")).json()
    assert found == {"product_id": product_id}
    previous = (await api.get(f"/ui/products/previous-prices?ids={product_id},99")).json()
    assert previous == {"previous": {str(product_id): "10.00"}}
    assert (await api.get("/ui/products/previous-prices?ids=x")).status_code == 422
    huge = "9" * 5000
    assert (await api.get(f"/ui/products/previous-prices?ids={huge}")).json() == {"previous": {}}


async def test_publisher_snapshots(api: httpx.AsyncClient) -> None:
    runtime = _app(api).state.runtime
    shared = publisher(runtime)
    snapshot = await shared.poll()
    assert snapshot["tasks_by_status"] == {}
    task_id = await _task(api)
    snapshot = await shared.poll()
    assert snapshot["tasks_by_status"] == {"pending": 1}
    assert [t["id"] for t in snapshot["changed_tasks"]] == [task_id]
    assert len(snapshot["pages_per_minute"]) == 60
    again = await shared.poll()
    assert again["changed_tasks"] == []  # only what changed since the last poll


async def test_publisher_sees_a_change_committed_late(api: httpx.AsyncClient) -> None:
    """A transaction that commits after a later one was published is still reported."""
    runtime = _app(api).state.runtime
    shared = Publisher(runtime.db, runtime.settings)
    early = await _task(api, "https://shop.example/p/1")
    late = await _task(api, "https://shop.example/p/2")
    first = await shared.poll()
    assert {t["id"] for t in first["changed_tasks"]} == {early, late}
    async with runtime.db.session() as session:
        newest = await session.scalar(select(func.max(CrawlTask.updated_at)))
        assert newest is not None
        # Paused "before" the newest change the publisher has seen, committed only now.
        await session.execute(
            update(CrawlTask)
            .where(CrawlTask.id == early)
            .values(status="paused", updated_at=newest - timedelta(milliseconds=500))
        )
    second = await shared.poll()
    assert [(t["id"], t["status"]) for t in second["changed_tasks"]] == [(early, "paused")]
    assert (await shared.poll())["changed_tasks"] == []


async def test_publisher_recounts_after_tasks_are_deleted(api: httpx.AsyncClient) -> None:
    """Counts are reused while nothing moves, but a deleted domain takes its tasks along."""
    runtime = _app(api).state.runtime
    shared = Publisher(runtime.db, runtime.settings)
    task_id = await _task(api)
    assert (await shared.poll())["tasks_by_status"] == {"pending": 1}
    assert (await shared.poll())["tasks_by_status"] == {"pending": 1}
    domain_id = (await api.get(f"/api/tasks/{task_id}")).json()["domain_id"]
    assert (await api.delete(f"/api/domains/{domain_id}")).status_code == 204
    assert (await shared.poll())["tasks_by_status"] == {}


async def test_one_publisher_polls_once_per_interval_for_every_tab(
    api: httpx.AsyncClient,
) -> None:
    runtime = _app(api).state.runtime
    shared = Publisher(runtime.db, runtime.settings, interval=0.05)
    tabs = [shared.subscribe() for _ in range(5)]
    try:
        for _ in range(3):
            messages = await asyncio.gather(*(tab.get() for tab in tabs))
            assert len(set(messages)) == 1  # every tab got the same snapshot
        # Three rounds for five tabs: about three polls, not fifteen.
        assert shared.polls <= 4
    finally:
        for tab in tabs:
            shared.unsubscribe(tab)
        await shared.stop()
    assert shared.subscribers == 0


async def test_publisher_survives_a_failed_poll(api: httpx.AsyncClient) -> None:
    runtime = _app(api).state.runtime
    shared = Publisher(runtime.db, runtime.settings, interval=0.05)
    real = shared.poll
    calls = {"n": 0}

    async def flaky() -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("database went away")
        return await real()

    shared.poll = flaky  # type: ignore[method-assign]
    tab = shared.subscribe()
    try:
        message = json.loads(await asyncio.wait_for(tab.get(), 10))
        assert "tasks_by_status" in message and calls["n"] >= 2
    finally:
        await shared.stop()


async def test_events_record_is_the_audit_log(api: httpx.AsyncClient) -> None:
    runtime = _app(api).state.runtime
    async with runtime.db.session() as session:
        session.add(Event(entity_type="proxy", entity_id="3", event="disabled", details=None))
    items = (await api.get("/api/events?entity_type=proxy")).json()["items"]
    assert [(e["entity_id"], e["event"]) for e in items] == [("3", "disabled")]
