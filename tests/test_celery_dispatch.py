"""Celery dispatch (issue 18) against the real RabbitMQ on 127.0.0.1:5672.

The queue side (claims into the outbox, routing, the worker's compare-and-set) and the relay's
publishing to the real RabbitMQ run in-process on both engines.
"""

from __future__ import annotations

import json

from kombu import Connection
from sqlalchemy import select

from forager.broker.relay import Relay
from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlTask, DispatchOutbox
from forager.queue import dispatch
from forager.queue.door import TaskQueue, pause, restart_parsing
from forager.store.backend import open_page_store
from tests.conftest import SettingsFactory
from tests.support.crawling import crawl, submit
from tests.support.rabbit import RABBIT_URL
from tests.support.site import TestSite


async def _outbox(db: Database) -> list[DispatchOutbox]:
    async with db.reader() as session:
        return list(await session.scalars(select(DispatchOutbox).order_by(DispatchOutbox.id)))


async def test_claims_write_the_outbox_and_one_take_wins(
    db: Database, settings: Settings, site: TestSite
) -> None:
    queue = TaskQueue(db, settings)
    reparse = (await submit(db, settings, site.url("/product/3")))[0]
    await crawl(db, settings, [reparse])  # database dispatch
    await restart_parsing(db, open_page_store(settings), reparse)
    (urgent,) = await submit(db, settings, site.url("/product/1"), priority=1)
    (normal,) = await submit(db, settings, site.url("/product/2"))

    assert await queue.claim_into_outbox("celery:relay-a") == 3
    rows = await _outbox(db)
    assert {(r.task_id, r.queue, r.lease_owner, r.sent_at) for r in rows} == {
        (urgent, "priority_queue", "celery:relay-a", None),
        (normal, "crawl_queue", "celery:relay-a", None),
        (reparse, "parse_queue", "celery:relay-a", None),
    }
    # Claimed work is not claimed again, by a relay or by a database worker.
    assert await queue.claim_into_outbox("celery:relay-b") == 0
    assert await queue.claim("w1", 10) == []

    # A relay that crashed after its commit: the rows are still unsent and are published.
    sent: list[int] = []

    async def send(messages: list[dispatch.Message]) -> None:
        sent.extend(m.task_id for m in messages)

    assert await queue.publish_outbox(send) == 3
    assert sorted(sent) == sorted([urgent, normal, reparse])
    assert await queue.publish_outbox(send) == 0  # marked sent: not published twice
    assert all(r.sent_at is not None for r in await _outbox(db))

    # The worker's compare-and-set: only the claim's owner, and only once.
    assert await queue.take(normal, "celery:relay-b", "w1") is None
    taken = await queue.take(normal, "celery:relay-a", "w1")
    assert taken is not None and taken.status == "crawling" and taken.url.endswith("/product/2")
    assert await queue.take(normal, "celery:relay-a", "w2") is None  # a duplicate delivery
    parse = await queue.take(reparse, "celery:relay-a", "w1")
    assert parse is not None and parse.status == "queued_parse"
    # Paused while waiting in RabbitMQ: the message finds nothing to take.
    await pause(db, urgent)
    assert await queue.take(urgent, "celery:relay-a", "w1") is None
    async with db.reader() as session:
        rows = await session.execute(select(CrawlTask.id, CrawlTask.lease_owner))
        owners = {row.id: row.lease_owner for row in rows}
    assert owners == {urgent: None, normal: "w1", reparse: "w1"}


async def test_waiting_tasks_are_capped(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(celery_max_queued=3)
    queue = TaskQueue(db, settings)
    await submit(db, settings, *(site.url(f"/product/{n}") for n in range(5)))
    assert await queue.claim_into_outbox("celery:relay-a") == 3
    assert await queue.claim_into_outbox("celery:relay-b") == 0  # three wait already
    first = (await _outbox(db))[0]
    assert await queue.take(first.task_id, first.lease_owner, "w1") is not None
    assert await queue.claim_into_outbox("celery:relay-b") == 1


async def test_the_relay_replays_a_dead_relays_outbox_into_rabbitmq(
    db: Database, make_settings: SettingsFactory, site: TestSite, queue_prefix: str
) -> None:
    settings = make_settings(dispatch="celery", celery_queue_prefix=queue_prefix)
    (urgent,) = await submit(db, settings, site.url("/product/1"), priority=1)
    (normal,) = await submit(db, settings, site.url("/product/2"))
    queue = TaskQueue(db, settings)
    # A relay that committed its claims and died before publishing them.
    assert await queue.claim_into_outbox("celery:dead-relay") == 2
    relay = Relay(db, settings)
    try:
        assert await relay.step() == 2  # nothing new to claim: the dead relay's rows
        assert await relay.step() == 0  # marked sent: not published twice
    finally:
        relay.close()
    assert all(r.sent_at is not None for r in await _outbox(db))

    received: dict[str, list[list[object]]] = {}
    with Connection(RABBIT_URL, connect_timeout=5) as conn:
        channel = conn.default_channel
        for name in (dispatch.PRIORITY_QUEUE, dispatch.CRAWL_QUEUE):  # declared when published to
            while (message := channel.basic_get(queue_prefix + name, no_ack=True)) is not None:
                assert message.headers["task"] == "forager.run_task"
                args, _, _ = json.loads(message.body)
                received.setdefault(name, []).append(args)
    assert received == {
        "priority_queue": [[urgent, "celery:dead-relay"]],
        "crawl_queue": [[normal, "celery:dead-relay"]],
    }
    # What a Celery worker does with each message: take the task under the claim's owner.
    for (task_id, owner), *_ in received.values():
        assert await queue.take(int(str(task_id)), str(owner), "w1") is not None
