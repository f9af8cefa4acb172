"""Operator actions through the API, on both engines: allowed moves, 409 refusals, races."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from forager.api.deps import Runtime
from forager.db.models import Event
from forager.queue.door import TaskQueue
from forager.store import packs
from forager.worker.pool import WorkerPool
from tests.support.crawling import crawl
from tests.support.site import TestSite
from tests.support.waiting import eventually


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def _submit(api: httpx.AsyncClient, url: str, **options: Any) -> dict[str, Any]:
    response = await api.post("/api/tasks", json={"url": url, **options})
    assert response.status_code == 201, response.text
    task: dict[str, Any] = response.json()["task"]
    return task


async def _act(api: httpx.AsyncClient, task_id: int, action: str, **body: Any) -> httpx.Response:
    return await api.post(f"/api/tasks/{task_id}/{action}", json=body or None)


async def _events(api: httpx.AsyncClient, task_id: int) -> list[str]:
    return [e["event"] for e in (await api.get(f"/api/tasks/{task_id}")).json()["events"]]


async def _crawl(api: httpx.AsyncClient, *ids: int) -> None:
    runtime = _runtime(api)
    await crawl(runtime.db, runtime.settings, list(ids))


def _refused(response: httpx.Response, current: str) -> None:
    assert response.status_code == 409, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["current_status"] == current


async def test_pause_resume_cancel_cycle(api: httpx.AsyncClient) -> None:
    task = await _submit(api, "https://shop.example/p/1")
    paused = await _act(api, task["id"], "pause")
    assert paused.status_code == 200
    assert paused.json()["status"] == "paused"
    _refused(await _act(api, task["id"], "pause"), "paused")
    _refused(await _act(api, task["id"], "restart"), "paused")
    resumed = await _act(api, task["id"], "resume")
    assert resumed.json()["status"] == "pending"
    _refused(await _act(api, task["id"], "resume"), "pending")
    assert (await _act(api, task["id"], "cancel")).json()["status"] == "cancelled"
    refusal = await _act(api, task["id"], "cancel")
    _refused(refusal, "cancelled")
    assert "cannot cancel task" in refusal.json()["detail"]
    assert await _events(api, task["id"]) == [
        "created",
        "paused",
        "resumed",
        "cancelled",
    ]


async def test_refused_actions_change_nothing(api: httpx.AsyncClient) -> None:
    task = await _submit(api, "https://shop.example/p/2", priority=3)
    before = (await api.get(f"/api/tasks/{task['id']}")).json()
    for action in ("resume", "restart", "restart-parsing"):
        _refused(await _act(api, task["id"], action), "pending")
    after = (await api.get(f"/api/tasks/{task['id']}")).json()
    assert after == before


async def test_unknown_task_is_404(api: httpx.AsyncClient) -> None:
    for action in ("pause", "resume", "cancel", "restart", "restart-parsing"):
        response = await _act(api, 999, action)
        assert response.status_code == 404
        assert response.json()["detail"] == "task 999 does not exist"
    assert (await api.patch("/api/tasks/999/priority", json={"priority": 1})).status_code == 404


async def test_restart_a_failed_task(api: httpx.AsyncClient, site: TestSite) -> None:
    task = await _submit(api, site.url("/status/404"))
    await _crawl(api, task["id"])
    failed = (await api.get(f"/api/tasks/{task['id']}")).json()
    assert (failed["status"], failed["error_type"]) == ("failed", "http_4xx")
    restarted = await _act(
        api, task["id"], "restart", priority=1, scheduled_at="2030-01-01T00:00:00Z"
    )
    body = restarted.json()
    assert (body["status"], body["priority"], body["retry_count"]) == ("pending", 1, 0)
    assert (body["error_type"], body["error_message"], body["completed_at"]) == (None, None, None)
    assert body["scheduled_at"].startswith("2030-01-01T00:00:00")
    # Scheduled in the future: a worker does not take it yet.
    runtime = _runtime(api)
    assert await TaskQueue(runtime.db, runtime.settings).claim("w", limit=5) == []


async def test_restart_options_are_validated(api: httpx.AsyncClient) -> None:
    task = await _submit(api, "https://shop.example/p/3")
    await _act(api, task["id"], "cancel")
    for body, field in [
        ({"priority": 0}, "priority"),
        ({"scheduled_at": "tomorrow"}, "scheduled_at"),
        ({"x": 1}, "x"),
    ]:
        response = await _act(api, task["id"], "restart", **body)
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == field
    assert (await api.get(f"/api/tasks/{task['id']}")).json()["status"] == "cancelled"


async def test_restart_parsing_reuses_the_stored_page(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    task = await _submit(api, site.url("/product/8"))
    await _crawl(api, task["id"])
    fetched = len(site.requests())
    response = await _act(api, task["id"], "restart-parsing")
    assert response.json()["status"] == "downloaded"
    await _crawl(api, task["id"])
    detail = (await api.get(f"/api/tasks/{task['id']}")).json()
    assert detail["status"] == "completed"
    assert len(site.requests()) == fetched  # parsed again without a new fetch
    assert [a["phase"] for a in detail["attempts"]] == ["fetch", "parse"]
    assert [e["event"] for e in detail["events"]][-4:] == [
        "restart_parsing",
        "queued_parse",
        "parsing",
        "completed",
    ]


async def test_restart_parsing_needs_the_stored_page(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    task = await _submit(api, site.url("/product/9"))
    await _crawl(api, task["id"])
    settings = _runtime(api).settings
    html_path = (await api.get(f"/api/tasks/{task['id']}")).json()["html_path"]
    packs.delete(settings.pages_dir, html_path)
    refusal = await _act(api, task["id"], "restart-parsing")
    _refused(refusal, "completed")
    assert "no stored page" in refusal.json()["detail"]


async def test_priority_change(api: httpx.AsyncClient) -> None:
    task = await _submit(api, "https://shop.example/p/4")
    response = await api.patch(f"/api/tasks/{task['id']}/priority", json={"priority": 2})
    assert (response.status_code, response.json()["priority"]) == (200, 2)
    bad = await api.patch(f"/api/tasks/{task['id']}/priority", json={"priority": 11})
    assert (bad.status_code, bad.json()["errors"][0]["field"]) == (422, "priority")
    assert (await _events(api, task["id"]))[-1] == "priority_changed"


async def test_pausing_a_running_task_wins_over_the_worker(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    task = await _submit(api, site.url("/hold/paused"))
    runtime = _runtime(api)
    pool = WorkerPool(runtime.db, runtime.settings, concurrency=1)
    runner = asyncio.create_task(pool.run())
    try:
        await eventually(lambda: site.held("paused") == 1, "the request in flight")
        paused = await _act(api, task["id"], "pause")
        assert paused.json()["status"] == "paused"
        site.release("paused")  # the page arrives after the pause
        await eventually(lambda: pool.processed == 1, "the worker to finish the task")
    finally:
        pool.stop()
        await runner
    detail = (await api.get(f"/api/tasks/{task['id']}")).json()
    assert detail["status"] == "paused"
    assert [a["outcome"] for a in detail["attempts"]] == ["discarded"]
    async with runtime.db.reader() as session:
        completed = await session.scalar(select(Event.id).where(Event.event == "completed"))
    assert completed is None


@pytest.mark.parametrize("action", ["pause", "cancel"])
async def test_actions_clear_the_lease(api: httpx.AsyncClient, action: str) -> None:
    task = await _submit(api, "https://shop.example/p/5")
    runtime = _runtime(api)
    [claimed] = await TaskQueue(runtime.db, runtime.settings).claim("w")
    assert claimed.id == task["id"]
    body = (await _act(api, task["id"], action)).json()
    assert (body["lease_owner"], body["lease_expires_at"]) == (None, None)
