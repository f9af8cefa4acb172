"""Batches (issue 35), on both engines: progress, and pause / resume / cancel / restart as a
whole against a real worker pool with requests in flight on the test site."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from forager.api.deps import Runtime
from forager.db.models import CrawlAttempt, CrawlTask, Event, ProductTag
from forager.queue import batches
from forager.worker.pool import WorkerPool
from tests.support.crawling import crawl
from tests.support.site import TestSite
from tests.support.waiting import eventually


@pytest.fixture
def api_settings() -> dict[str, Any]:
    """Requests held at the test site wait for the test, not for a fetch timeout (a loaded
    machine can take seconds between the steps)."""
    return {"fetch_timeout_seconds": 120.0, "parse_processes": 1}


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def _submit(api: httpx.AsyncClient, urls: list[Any], **options: Any) -> dict[str, Any]:
    response = await api.post("/api/tasks/batch", json={"urls": urls, **options})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _batch(api: httpx.AsyncClient, name: str) -> dict[str, Any]:
    response = await api.get(f"/api/batches/{name}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _move(api: httpx.AsyncClient, name: str, action: str, **body: Any) -> dict[str, Any]:
    response = await api.post(f"/api/batches/{name}/{action}", json=body or None)
    assert response.status_code == 200, response.text
    moved: dict[str, Any] = response.json()
    return moved


async def _tasks(api: httpx.AsyncClient, name: str) -> list[CrawlTask]:
    async with _runtime(api).db.reader() as session:
        query = select(CrawlTask).where(CrawlTask.batch_name == name).order_by(CrawlTask.id)
        return list(await session.scalars(query))


async def _statuses(api: httpx.AsyncClient, name: str) -> list[str]:
    return sorted(t.status for t in await _tasks(api, name))


async def _leased(api: httpx.AsyncClient, name: str) -> list[int]:
    return [t.id for t in await _tasks(api, name) if t.lease_owner is not None]


@contextlib.asynccontextmanager
async def _pool(api: httpx.AsyncClient, concurrency: int) -> AsyncIterator[WorkerPool]:
    runtime = _runtime(api)
    pool = WorkerPool(runtime.db, runtime.settings, concurrency=concurrency)
    runner = asyncio.create_task(pool.run())
    try:
        yield pool
    finally:
        pool.stop()
        await runner


async def _other_task_completes(api: httpx.AsyncClient, site: TestSite, n: int) -> None:
    """A task of another batch is crawled: the workers are claiming while the batch waits."""
    [result] = (await _submit(api, [site.url(f"/product/{n}")], batch_name="other"))["results"]
    task_id = result["task_id"]

    async def done() -> bool:
        task = (await api.get(f"/api/tasks/{task_id}")).json()
        return bool(task["status"] == "completed")

    await eventually(done, "the other batch's task to complete")


def _turns(site: TestSite, key: str) -> int:
    """Requests the site answered at /turn/{key}."""
    return sum(1 for r in site.requests() if r.path.startswith(f"/turn/{key}"))


async def _in_flight(api: httpx.AsyncClient, site: TestSite, key: str, name: str) -> None:
    """Two of the batch's requests are held at the site, one of its tasks has completed."""
    await eventually(lambda: site.held(key) == 2, "two requests in flight")
    site.let_one(key)

    async def one_done_two_held() -> bool:
        done = (await _statuses(api, name)).count("completed")
        return done == 1 and site.held(key) == 2

    await eventually(one_done_two_held, "one task done, the next one taken")


async def _events(api: httpx.AsyncClient, entity_type: str, event: str) -> list[Event]:
    async with _runtime(api).db.reader() as session:
        query = select(Event).where(Event.entity_type == entity_type, Event.event == event)
        return list(await session.scalars(query.order_by(Event.id)))


async def _outcomes(api: httpx.AsyncClient, ids: list[int]) -> list[str]:
    async with _runtime(api).db.reader() as session:
        query = select(CrawlAttempt.outcome).where(CrawlAttempt.task_id.in_(ids))
        return sorted(await session.scalars(query))


async def _discarded(api: httpx.AsyncClient, ids: list[int]) -> None:
    """The workers that held ``ids`` have finished with them: each try was discarded."""

    async def written() -> bool:
        return await _outcomes(api, ids) == ["discarded"] * len(ids)

    await eventually(written, "the tries in flight to be discarded")


async def test_a_batch_paused_mid_run_stops_then_finishes_when_resumed(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    urls = [site.url(f"/turn/p?n={n}") for n in range(1, 7)]
    assert (await _submit(api, urls, batch_name="black-friday"))["created"] == 6
    async with _pool(api, concurrency=2):
        await _in_flight(api, site, "p", "black-friday")
        held = await _leased(api, "black-friday")
        paused = await _move(api, "black-friday", "pause")
        assert (paused["moved"], paused["to"]) == (5, "paused")  # 2 in flight, 3 waiting
        assert paused["batch"]["state"] == "paused"
        assert paused["batch"]["by_status"] == {"completed": 1, "paused": 5}
        site.release("p")  # the two pages in flight arrive after the pause
        await _discarded(api, held)
        await _other_task_completes(api, site, 7)
        assert await _statuses(api, "black-friday") == ["completed"] + ["paused"] * 5
        assert _turns(site, "p") == 3  # nothing of the batch was fetched after the pause

        resumed = await _move(api, "black-friday", "resume")
        assert (resumed["moved"], resumed["to"]) == (5, "pending")

        async def finished() -> dict[str, Any] | None:
            batch = await _batch(api, "black-friday")
            return batch if batch["state"] == "finished" else None

        batch = await eventually(finished, "the resumed batch to finish")
    assert batch["by_status"] == {"completed": 6}
    assert batch["products"] == 6
    assert batch["pages_per_minute"] > 0
    assert batch["estimated_end"] is None  # nothing remains
    [pause_event] = await _events(api, "batch", "paused")
    assert (pause_event.entity_id, pause_event.actor) == ("black-friday", "test-admin")
    assert pause_event.details == {"by": "test-admin", "moved": 5}
    task_events = await _events(api, "task", "paused")
    assert len(task_events) == 5
    assert {e.actor for e in task_events} == {"test-admin"}


async def test_a_batch_cancelled_with_work_in_flight_runs_nothing_after(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    urls = [site.url(f"/turn/c?n={n}") for n in range(1, 6)]
    await _submit(api, urls, batch_name="competitor-x")
    async with _pool(api, concurrency=2):
        await _in_flight(api, site, "c", "competitor-x")
        held = await _leased(api, "competitor-x")
        cancelled = await _move(api, "competitor-x", "cancel")
        assert (cancelled["moved"], cancelled["to"]) == (4, "cancelled")
        site.release("c")
        await _discarded(api, held)
        await _other_task_completes(api, site, 8)
    tasks = await _tasks(api, "competitor-x")
    assert sorted(t.status for t in tasks) == ["cancelled"] * 4 + ["completed"]  # none lost
    assert all(t.lease_owner is None for t in tasks)
    assert _turns(site, "c") == 3
    cancelled_ids = [t.id for t in tasks if t.status == "cancelled"]
    # The two in flight each tried once and were discarded; the others were never tried.
    assert set(held) <= set(cancelled_ids)
    assert await _outcomes(api, cancelled_ids) == ["discarded", "discarded"]
    batch = await _batch(api, "competitor-x")
    assert (batch["state"], batch["done"], batch["remaining"]) == ("finished", 5, 0)
    # A second cancel moves nothing: finished tasks keep their status.
    assert (await _move(api, "competitor-x", "cancel"))["moved"] == 0


async def test_restart_failed_only_then_all(api: httpx.AsyncClient, site: TestSite) -> None:
    runtime = _runtime(api)
    good = [site.url(f"/product/{n}") for n in (11, 12)]
    bad = [site.url(f"/status/404?n={n}") for n in (1, 2, 3)]
    submitted = await _submit(api, good + bad, batch_name="spring")
    ids = [r["task_id"] for r in submitted["results"]]
    await crawl(runtime.db, runtime.settings, ids)
    batch = await _batch(api, "spring")
    assert batch["by_status"] == {"completed": 2, "failed": 3}
    assert batch["failures"] == {"http_4xx": 3}
    assert batch["products"] == 2

    again = await _move(api, "spring", "restart")  # failed only, by default
    assert (again["moved"], again["to"]) == (3, "pending")
    assert await _statuses(api, "spring") == ["completed"] * 2 + ["pending"] * 3
    assert all(t.retry_count == 0 and t.error_type is None for t in await _tasks(api, "spring"))
    await crawl(runtime.db, runtime.settings, ids)

    everything = await _move(api, "spring", "restart", only="all")
    assert everything["moved"] == 5
    assert await _statuses(api, "spring") == ["pending"] * 5
    assert len(await _events(api, "task", "restarted")) == 8


async def test_moves_walk_the_batch_in_chunks_and_hold_finished_recurring_tasks(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batches, "CHUNK", 3)
    urls = [f"https://shop.example/p/{n}" for n in range(10)]
    await _submit(api, urls, batch_name="chunked")
    await _submit(api, ["https://shop.example/q/1"], batch_name="untouched")
    assert (await _move(api, "chunked", "pause"))["moved"] == 10
    assert await _statuses(api, "chunked") == ["paused"] * 10
    assert await _statuses(api, "untouched") == ["pending"]
    assert (await _move(api, "chunked", "resume"))["moved"] == 10
    assert await _statuses(api, "chunked") == ["pending"] * 10

    # A recurring task that finished is held too, or the scheduler would make it due again.
    await _submit(api, ["https://shop.example/r/1"], batch_name="daily", is_recurring=True)
    runtime = _runtime(api)
    async with runtime.db.session() as session:  # as a finished crawl leaves it
        query = select(CrawlTask).where(CrawlTask.batch_name == "daily")
        task = (await session.scalars(query)).one()
        task.status, task.next_crawl_at = "completed", task.created_at
    assert (await _move(api, "daily", "pause"))["moved"] == 1
    assert await _statuses(api, "daily") == ["paused"]
    resumed = await _move(api, "daily", "resume")
    assert resumed["moved"] == 1
    [task] = await _tasks(api, "daily")
    assert (task.status, task.next_crawl_at) == ("pending", None)


async def test_list_and_unknown_batches(api: httpx.AsyncClient) -> None:
    await _submit(api, ["https://shop.example/a/1", "https://shop.example/a/2"], batch_name="a")
    await _submit(api, ["https://shop.example/b/1"], batch_name="b")
    await _submit(api, ["https://shop.example/none/1"])  # no batch
    listed = (await api.get("/api/batches")).json()
    assert listed["total"] == 2
    assert [(b["name"], b["total"], b["state"]) for b in listed["items"]] == [
        ("b", 1, "running"),
        ("a", 2, "running"),
    ]
    second = (await api.get("/api/batches", params={"limit": 1, "offset": 1})).json()
    assert [b["name"] for b in second["items"]] == ["a"]
    for response in (
        await api.get("/api/batches/nope"),
        await api.post("/api/batches/nope/pause"),
    ):
        assert response.status_code == 404
        assert "nope" in response.json()["detail"]
    bad = await api.post("/api/batches/a/restart", json={"only": "some"})
    assert (bad.status_code, bad.json()["errors"][0]["field"]) == (422, "only")
    read = {"Authorization": f"Bearer {api.keys['read']}"}  # type: ignore[attr-defined]
    assert (await api.post("/api/batches/a/pause", headers=read)).status_code == 403
    assert (await api.get("/api/batches/a", headers=read)).status_code == 200


async def test_each_url_of_a_batch_carries_its_own_options(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    later = "2030-01-01T00:00:00Z"
    body = {
        "batch_name": "mixed",
        "priority": 7,
        "tags": ["sale"],
        "urls": [
            "https://shop.example/m/1",
            {
                "url": "https://shop.example/m/2",
                "priority": 1,
                "tags": ["front"],
                "max_retries": None,
            },
            {"url": "https://shop.example/m/3", "scheduled_at": later, "is_recurring": True},
            {"url": site.url("/lookup"), "request": {"json_body": {"sku": "A-1"}}},
            {"url": "https://shop.example/m/4", "request": {"method": "GET", "form": {"a": "b"}}},
            "not a url",
            "https://shop.example/m/1",
        ],
    }
    response = await api.post("/api/tasks/batch", json=body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["result"] for r in results] == [
        "created",
        "created",
        "created",
        "created",
        "invalid",
        "invalid",
        "duplicate",
    ]
    assert results[4]["error"] == "urls.4.request.method: a body is sent with method POST only"
    assert results[5]["error"]
    assert (response.json()["created"], response.json()["invalid"]) == (4, 2)
    tasks = {t.url: t for t in await _tasks(api, "mixed")}
    first, second, third = (tasks[f"https://shop.example/m/{n}"] for n in (1, 2, 3))
    assert (first.priority, second.priority, third.priority) == (7, 1, 7)
    assert second.max_retries == first.max_retries  # null: the batch's
    assert third.is_recurring and not first.is_recurring
    assert third.scheduled_at.year == 2030
    lookup = tasks[results[3]["url"]]
    assert lookup.fetch_request is not None and lookup.fetch_request["method"] == "POST"
    async with _runtime(api).db.reader() as session:
        tags = {(t.url_hash, t.tag) for t in await session.scalars(select(ProductTag))}
    assert {tag for h, tag in tags if h == second.url_hash} == {"sale", "front"}
    assert {tag for h, tag in tags if h == first.url_hash} == {"sale"}
    # A known URL's own options that were not applied are named in its hint.
    again = await _submit(api, [{"url": "https://shop.example/m/1", "priority": 2}])
    assert "not applied: priority 2 (the task has 7)" in again["results"][0]["hint"]
