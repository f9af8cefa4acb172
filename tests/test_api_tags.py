"""Product tags and recrawl settings over the API, on both engines (issue 17): tags given on
submission (single, batch, ``forager submit`` lines) reach the product, are replaced per product
and changed in bulk, filter the product list and export, and scope alert rules; a task's
adaptive recrawl is set on submission and edited later."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
from sqlalchemy import select

from forager import bulk
from forager.db.models import AlertDelivery, CrawlTask
from forager.queue.door import TaskQueue
from tests.support.products import runtime_of as _runtime
from tests.support.products import save

PROBLEM = "application/problem+json"
HOOK = "https://hooks.example.com/forager"


async def _save(api: httpx.AsyncClient, task_id: int, price: str) -> int:
    """Save a product for the task the way the pipeline does; its id."""
    async with _runtime(api).db.reader() as session:
        url = (await session.get_one(CrawlTask, task_id)).url
    return await save(api, url, product_name="Kettle", price=Decimal(price), currency="EUR")


async def _submit(api: httpx.AsyncClient, url: str, **options: Any) -> dict[str, Any]:
    answer = await api.post("/api/tasks", json={"url": url, **options})
    assert answer.status_code in (200, 201), answer.text
    task: dict[str, Any] = answer.json()["task"]
    return task


async def _names(api: httpx.AsyncClient, **query: str) -> list[str]:
    answer = await api.get("/api/products", params=query)
    assert answer.status_code == 200, answer.text
    return sorted(p["url"].rsplit("/", 1)[1] for p in answer.json()["items"])


async def test_tags_from_submission_to_products_filters_and_exports(api: httpx.AsyncClient) -> None:
    a = await _submit(api, "https://tags.test/a", tags=["kettles", "black-friday"])
    batch = await api.post(
        "/api/tasks/batch",
        json={"urls": ["https://tags.test/b", "https://tags.test/c"], "tags": ["kettles"]},
    )
    assert batch.json()["created"] == 2
    b_id, c_id = (r["task_id"] for r in batch.json()["results"])
    lines = ['{"url": "https://tags.test/d", "tags": ["toasters"]}', "https://tags.test/e"]
    runtime = _runtime(api)
    totals = await bulk.submit_lines(runtime.db, runtime.settings, lines, {})
    assert (totals.created, totals.invalid) == (2, 0)
    async with runtime.db.reader() as session:
        rows = await session.execute(select(CrawlTask.url, CrawlTask.id))
        ids = {row.url: row.id for row in rows}
    products = {
        name: await _save(api, task_id, "10.00")
        for name, task_id in (
            ("a", a["id"]),
            ("b", b_id),
            ("c", c_id),
            ("d", ids["https://tags.test/d"]),
            ("e", ids["https://tags.test/e"]),
        )
    }
    one = (await api.get(f"/api/products/{products['a']}")).json()
    assert one["tags"] == ["black-friday", "kettles"]  # sorted
    assert await _names(api, tag="kettles") == ["a", "b", "c"]
    assert await _names(api, tag="toasters") == ["d"]
    assert await _names(api, tag="kettles", q="kettle") == ["a", "b", "c"]
    export = await api.get("/api/products/export.jsonl", params={"tag": "black-friday"})
    assert [line.count('"url"') for line in export.text.splitlines()] == [1]

    # A duplicate submission adds its tags; PATCH replaces a product's; bulk adds and removes.
    await _submit(api, "https://tags.test/e", tags=["kettles"])
    assert await _names(api, tag="kettles") == ["a", "b", "c", "e"]
    patched = await api.patch(f"/api/products/{products['a']}", json={"tags": ["descaled"]})
    assert patched.status_code == 200 and patched.json()["tags"] == ["descaled"]
    changed = await api.post(
        "/api/products/tags",
        json={
            "product_ids": [products["b"], products["d"], 999_999],
            "add": ["sale"],
            "remove": ["kettles"],
        },
    )
    assert changed.json() == {"updated": 2, "product_ids": sorted([products["b"], products["d"]])}
    assert await _names(api, tag="kettles") == ["c", "e"]
    assert await _names(api, tag="sale") == ["b", "d"]

    for bad in (
        api.patch(f"/api/products/{products['a']}", json={"tags": ["no spaces"]}),
        api.post("/api/tasks", json={"url": "https://tags.test/f", "tags": ["x" * 51]}),
        api.get("/api/products", params={"tag": "Kettles"}),
    ):
        refused = await bad
        assert refused.status_code == 422, refused.text
        assert refused.headers["content-type"].startswith(PROBLEM)
    missing = await api.patch("/api/products/999999", json={"tags": []})
    assert missing.status_code == 404


async def test_alert_rules_scoped_to_a_tag(api: httpx.AsyncClient) -> None:
    tagged = await _submit(api, "https://tags.test/kettle", tags=["kettles"])
    other = await _submit(api, "https://tags.test/toaster")
    rule = await api.post(
        "/api/alerts/rules",
        json={"name": "kettles", "kind": "price_drop", "tag": "kettles", "webhook_url": HOOK},
    )
    assert rule.status_code == 201, rule.text
    assert rule.json()["tag"] == "kettles"
    for task in (tagged, other):
        await _save(api, task["id"], "100.00")
        await _save(api, task["id"], "90.00")
    runtime = _runtime(api)
    async with runtime.db.reader() as session:
        fired = list(await session.scalars(select(AlertDelivery.payload)))
    assert [p["product"]["url"] for p in fired] == ["https://tags.test/kettle"]
    # task_failed by tag: the failed task's URL carries the tag.
    failing = await api.post(
        "/api/alerts/rules",
        json={"name": "f", "kind": "task_failed", "tag": "kettles", "webhook_url": HOOK},
    )
    assert failing.status_code == 201, failing.text
    broken = await _submit(api, "https://gone.test/kettle", tags=["kettles"])
    plain = await _submit(api, "https://gone.test/toaster")
    queue = TaskQueue(runtime.db, runtime.settings)
    claimed = await queue.claim("w", 5, start=True, domains=["gone.test"])
    assert {t.id for t in claimed} == {broken["id"], plain["id"]}
    for task in claimed:
        async with runtime.db.session() as session:
            status = await queue.fail(session, task, "w", error_type="http_4xx", message="404")
        assert status == "failed"
    async with runtime.db.reader() as session:
        failed = list(
            await session.scalars(
                select(AlertDelivery.subject_id).where(AlertDelivery.event == "task_failed")
            )
        )
    assert failed == [str(broken["id"])]
    refused = await api.post(
        "/api/alerts/rules",
        json={"name": "b", "kind": "breaker_opened", "tag": "kettles", "webhook_url": HOOK},
    )
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "tag"


async def test_adaptive_recrawl_is_set_on_submission_and_edited(api: httpx.AsyncClient) -> None:
    task = await _submit(
        api,
        "https://tags.test/adaptive",
        is_recurring=True,
        crawl_frequency_seconds=86_400,
        adaptive_recrawl=True,
        min_crawl_frequency_seconds=3600,
    )
    assert (task["adaptive_recrawl"], task["current_crawl_frequency_seconds"]) == (True, 86_400)
    assert (task["min_crawl_frequency_seconds"], task["max_crawl_frequency_seconds"]) == (
        3600,
        604_800,
    )
    assert task["crawl_frequency_reason"] == "starting frequency 1 d"
    edited = await api.patch(
        f"/api/tasks/{task['id']}/recrawl",
        json={"crawl_frequency_seconds": 7200, "max_crawl_frequency_seconds": None},
    )
    assert edited.status_code == 200, edited.text
    body = edited.json()
    assert (body["crawl_frequency_seconds"], body["current_crawl_frequency_seconds"]) == (
        7200,
        7200,
    )
    assert (body["min_crawl_frequency_seconds"], body["max_crawl_frequency_seconds"]) == (
        3600,
        50_400,  # back to the default: 7 times the frequency
    )
    assert body["crawl_frequency_reason"].startswith("set by ")
    implied = await _submit(api, "https://tags.test/implied", adaptive_recrawl=True)
    assert (implied["is_recurring"], implied["adaptive_recrawl"]) == (True, True)
    off = await api.patch(f"/api/tasks/{task['id']}/recrawl", json={"is_recurring": False})
    assert (off.json()["adaptive_recrawl"], off.json()["current_crawl_frequency_seconds"]) == (
        False,
        None,
    )
