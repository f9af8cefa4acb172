"""Submitting a URL again (issue 34, item 7): a duplicate says what its options did not change on
the known task and how to crawl it again; ``restart: true`` crawls a finished one again."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.cli import forager
from tests.support.crawling import crawl
from tests.support.site import TestSite


async def _completed(api: httpx.AsyncClient, url: str) -> int:
    made = await api.post("/api/tasks", json={"url": url})
    assert made.status_code == 201, made.text
    task_id: int = made.json()["task"]["id"]
    runtime = api.app.state.runtime  # type: ignore[attr-defined]
    tasks = await crawl(runtime.db, runtime.settings, [task_id])
    assert tasks[task_id].status == "completed", tasks[task_id].error_message
    return task_id


async def test_a_duplicate_of_a_completed_task_says_how_to_crawl_it_again(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    url = site.url("/product/3")
    task_id = await _completed(api, url)
    again = await api.post("/api/tasks/batch", json={"urls": [url], "priority": 1})
    [result] = again.json()["results"]
    assert (result["result"], result["task_id"], result["status"]) == (
        "duplicate",
        task_id,
        "completed",
    )
    assert result["hint"] == (
        "the task exists with status completed; not applied: priority 1 (the task has 5); to "
        f"crawl it again submit with restart: true or POST /api/tasks/{task_id}/restart"
    )
    one = await api.post("/api/tasks", json={"url": url, "priority": 1})
    assert one.status_code == 200 and one.json()["result"] == "duplicate"
    assert one.json()["hint"] == result["hint"]
    assert one.json()["task"]["priority"] == 5  # nothing changed

    restarted = await api.post(
        "/api/tasks/batch", json={"urls": [url], "priority": 2, "restart": True}
    )
    [result] = restarted.json()["results"]
    assert (result["result"], result["status"]) == ("duplicate", "pending")
    assert result["hint"] == "restarted: the task was completed; crawled again"
    task = (await api.get(f"/api/tasks/{task_id}")).json()
    assert (task["status"], task["priority"]) == ("pending", 2)
    assert task["events"][-1]["event"] == "restarted"


async def test_a_duplicate_of_a_waiting_task_is_not_restarted(api: httpx.AsyncClient) -> None:
    url = "https://shop.example.com/p/1"
    first = await api.post("/api/tasks", json={"url": url, "scheduled_at": "2099-01-01T00:00Z"})
    task_id = first.json()["task"]["id"]
    again = await api.post("/api/tasks/batch", json={"urls": [url], "restart": True})
    [result] = again.json()["results"]
    assert (result["result"], result["status"]) == ("duplicate", "pending")
    assert result["hint"] == "the task exists with status pending"
    task = (await api.get(f"/api/tasks/{task_id}")).json()
    assert task["scheduled_at"].startswith("2099-01-01")  # untouched
    fresh = await api.post("/api/tasks/batch", json={"urls": ["https://shop.example.com/p/2"]})
    assert fresh.json()["results"][0]["hint"] is None


def test_forager_submit_refuses_a_restart_line(
    tmp_path: Path, cli_env: dict[str, str], db_url: str
) -> None:
    (tmp_path / "urls.txt").write_text('{"url": "https://shop.example/p/1", "restart": true}\n')
    ran = forager(tmp_path, {**cli_env, "FORAGER_DATABASE_URL": db_url}, "submit", "urls.txt")
    assert ran.returncode == 1
    assert ran.stderr.strip().startswith("line 1: restart: forager submit does not restart")
