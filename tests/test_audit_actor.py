"""The audit trail says who: the API key's name (API or dashboard), ``cli``, or nobody (workers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from sqlalchemy import select

from forager.api.deps import Runtime
from forager.db.models import Event
from tests.support.crawling import crawl
from tests.support.site import TestSite


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def _actors(
    api: httpx.AsyncClient, entity_type: str, entity_id: int
) -> list[tuple[str, str | None]]:
    async with _runtime(api).db.reader() as session:
        rows = await session.execute(
            select(Event.event, Event.actor)
            .where(Event.entity_type == entity_type, Event.entity_id == str(entity_id))
            .order_by(Event.id)
        )
        return [(e, a) for e, a in rows]


async def test_api_and_dashboard_events_name_the_key(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    created = (await api.post("/api/tasks", json={"url": site.url("/product/1")})).json()
    task_id = created["task"]["id"]
    assert created["task"]["created_by"] == "test-admin"
    assert (await api.post(f"/api/tasks/{task_id}/pause")).status_code == 200
    domain = (await api.post("/api/domains", json={"domain_name": "audit.example"})).json()
    proxy = await api.post("/api/proxies", json={"proxy_url": "proxy.example", "proxy_port": 3128})
    assert proxy.status_code == 201, proxy.text
    assert await _actors(api, "task", task_id) == [
        ("created", "test-admin"),
        ("paused", "test-admin"),
    ]
    assert await _actors(api, "domain", domain["id"]) == [("created", "test-admin")]
    assert await _actors(api, "proxy", proxy.json()["id"]) == [("created", "test-admin")]

    # The dashboard: a session cookie and CSRF token instead of a Bearer header.
    read_key = api.keys["read"]  # type: ignore[attr-defined]
    transport = api._transport  # the same in-process app
    async with httpx.AsyncClient(transport=transport, base_url="http://forager.test") as browser:
        who = (await browser.post("/ui/login", json={"key": api.keys["admin"]})).json()  # type: ignore[attr-defined]
        resumed = await browser.post(
            f"/api/tasks/{task_id}/resume", headers={"X-CSRF-Token": who["csrf_token"]}
        )
        assert resumed.status_code == 200, resumed.text
    events = (await api.get("/api/events", params={"entity_type": "task"})).json()["items"]
    assert events[0]["event"] == "resumed" and events[0]["actor"] == "test-admin"
    assert all(read_key not in str(e) and api.keys["admin"] not in str(e) for e in events)  # type: ignore[attr-defined]

    # What a worker does is the system's own: no actor.
    await crawl(_runtime(api).db, _runtime(api).settings, [task_id])
    worker_events = [a for e, a in await _actors(api, "task", task_id) if e == "completed"]
    assert worker_events == [None]


def test_cli_events_name_cli(db_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORAGER_")} | {
        "FORAGER_DATA_DIR": str(tmp_path / "data"),
        "FORAGER_DATABASE_URL": db_url,
    }
    created = subprocess.run(
        [sys.executable, "-m", "forager.cli", "apikey", "create", "--name", "ops"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr

    async def actors() -> list[tuple[str, str | None]]:
        from forager.db.engine import Database

        db = Database(db_url)
        try:
            async with db.reader() as session:
                rows = await session.execute(
                    select(Event.event, Event.actor).where(Event.entity_type == "api_key")
                )
                return [(e, a) for e, a in rows]
        finally:
            await db.dispose()

    import asyncio

    assert asyncio.run(actors()) == [("created", "cli")]
