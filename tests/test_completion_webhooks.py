"""Completion webhooks (issue 35, seed 004's webhook_url): a task's and a batch's products
posted through the signed outbox to a real receiver on loopback after a real crawl."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.alerts import completion
from forager.alerts.deliver import Deliverer
from forager.alerts.webhook import signature
from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import AlertDelivery, CrawlTask
from forager.queue.door import SubmitSpec, submit_urls
from tests.support.crawling import crawl
from tests.support.receiver import Receiver
from tests.support.site import TestSite
from tests.support.waiting import eventually

SECRET = "a-secret-of-the-receiver"


# One engine: the PostgreSQL path of the same statements is the concurrency test below.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_task_and_a_batch_post_their_products_when_they_complete(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = api.app.state.runtime  # type: ignore[attr-defined]
    deliverer = Deliverer(runtime.db, runtime.settings, runtime.box)
    try:
        async with Receiver() as receiver:
            hooked = {"webhook_url": receiver.url, "webhook_secret": SECRET}
            batch_urls = [site.url("/product/1"), site.url("/product/2")]
            no_batch = await api.post("/api/tasks/batch", json={"urls": batch_urls, **hooked})
            assert no_batch.status_code == 422 and "webhook_url" in no_batch.text
            batch = await api.post(
                "/api/tasks/batch", json={"urls": batch_urls, "batch_name": "bf", **hooked}
            )
            assert batch.status_code == 200, batch.text
            again = await api.post(  # the same batch's next request: still one hook
                "/api/tasks/batch",
                json={"urls": [site.url("/product/1")], "batch_name": "bf", **hooked},
            )
            assert again.json()["duplicate"] == 1
            one = await api.post("/api/tasks", json={"url": site.url("/product/3"), **hooked})
            assert one.status_code == 201, one.text
            ids = [r["task_id"] for r in batch.json()["results"]] + [one.json()["task"]["id"]]
            done = await crawl(runtime.db, runtime.settings, ids)
            assert {t.status for t in done.values()} == {"completed"}

            async def both() -> list[Any] | None:
                await deliverer.step()
                return receiver.requests if len(receiver.requests) >= 2 else None

            received = await eventually(both, "two completion webhooks", timeout=20)
            await deliverer.step()
            assert len(receiver.requests) == 2  # each fired once
            bodies = {}
            for request in received:
                stamp = request.headers["x-forager-timestamp"]
                assert request.headers["x-forager-signature"] == signature(
                    SECRET, stamp, request.body
                )
                body = json.loads(request.body)
                bodies[body["event"]] = body
            task_body, batch_body = bodies["task_completed"], bodies["batch_completed"]
            assert task_body["task"]["id"] == ids[2]
            assert [p["url"] for p in task_body["products"]] == [site.url("/product/3")]
            assert task_body["products"][0]["product_name"]
            assert batch_body["batch"] == {"name": "bf", "tasks": {"completed": 2}}
            assert sorted(p["url"] for p in batch_body["products"]) == sorted(batch_urls)
            assert batch_body["products_total"] == 2

            rules = (await api.get("/api/alerts/rules")).json()["items"]
            assert sorted(r["kind"] for r in rules) == ["batch_completed", "task_completed"]
            assert all(SECRET not in json.dumps(r) for r in rules)
            deliveries = (await api.get("/api/alerts/deliveries")).json()
            assert deliveries["total"] == 2
    finally:
        await deliverer.aclose()


async def test_a_webhook_the_egress_policy_forbids_is_refused() -> None:
    from forager.errors import InvalidRequest

    for url, policy in [("http://169.254.169.254/latest", "all"), ("http://127.0.0.1:9/", "none")]:
        with pytest.raises(InvalidRequest) as refused:
            await completion.check_url(url, policy)
        assert refused.value.field == "webhook_url"


# SQLite writers serialize: the two transactions cannot overlap.
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_a_batch_whose_last_two_tasks_end_at_once_fires_once(
    db: Database, settings: Settings
) -> None:
    """PostgreSQL: two transactions each end one of a batch's last two tasks; the first locks the
    hook and sees the other task still running; the second waits for it, then counts again and
    fires. Without the lock both would see the other's task running and neither would fire."""
    outcomes = await submit_urls(
        db,
        settings,
        [SubmitSpec(url=f"https://shop.example/p/{n}", batch_name="bf") for n in range(2)],
    )
    first, second = (o.task_id for o in outcomes)
    await completion.register(
        db, SecretBox(settings), url="http://127.0.0.1:9/hook", secret=None, batch_name="bf"
    )

    async def end(session: AsyncSession, task_id: int | None) -> None:
        await session.execute(
            update(CrawlTask).where(CrawlTask.id == task_id).values(status="completed")
        )
        await completion.events(
            session,
            [{"entity_type": "task", "entity_id": str(task_id), "details": {"to": "completed"}}],
        )

    async with db.session() as one:
        await end(one, first)

        async def other() -> None:
            async with db.session() as two:
                await end(two, second)

        running = asyncio.create_task(other())

        async def waits() -> bool | None:
            async with db.reader() as session:
                found = await session.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()"
                    )
                )
            return True if found else None

        await eventually(waits, "the second transaction waiting for the hook", timeout=20)
    await running
    async with db.reader() as session:
        sent = list(await session.scalars(select(AlertDelivery.payload)))
    assert len(sent) == 1 and sent[0]["batch"]["tasks"] == {"completed": 2}
