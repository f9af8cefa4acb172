"""The agent protocol spoken by hand over a real WebSocket to the real app on loopback.

Covers what a well-behaved agent program never does on its own: wrong and missing tokens,
bad versions, results for tasks it no longer holds, oversize bodies, huge messages.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from forager.agents import admin, protocol
from forager.db.engine import Database
from forager.db.models import Agent, CrawlAttempt, CrawlTask, Domain, Event, Product
from forager.db.types import utcnow
from forager.queue.door import TaskQueue
from tests.conftest import SettingsFactory
from tests.support.agents import app_server
from tests.support.crawling import submit, tasks_by_id
from tests.support.site import TestSite
from tests.support.waiting import entity_events, eventually

TIMEOUT = 20


@pytest.fixture
async def server(make_settings: SettingsFactory) -> AsyncIterator[tuple[str, Database, Any]]:
    settings = make_settings(serve_workers=0, max_body_bytes=256 * 1024)
    async with app_server(settings) as (url, app):
        yield protocol.ws_url(url), app.state.runtime.db, app


class RawAgent:
    """A hand-driven agent connection."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def hello(self, token: str | None, **extra: Any) -> dict[str, Any]:
        await self.send(
            protocol.message("hello", token=token, agent_version="test", **extra),
        )
        return await self.recv()

    async def send(self, data: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(data))

    async def recv(self, kind: str | None = None) -> dict[str, Any]:
        async with asyncio.timeout(TIMEOUT):
            while True:
                msg: dict[str, Any] = json.loads(await self.ws.recv())
                if kind is None or msg["type"] == kind:
                    return msg

    async def result(
        self, task_id: int, body: bytes, *, declared: int | None = None, url: str = ""
    ) -> None:
        await self.send(
            protocol.message(
                "result",
                task_id=task_id,
                ok=True,
                status_code=200,
                final_url=url,
                headers={"content-type": "text/html; charset=utf-8"},
                elapsed_ms=5,
                body_bytes=len(body) if declared is None else declared,
            )
        )
        packed = zlib.compress(body, 6, 31) if body else b""
        for start in range(0, len(packed), protocol.CHUNK_BYTES):
            chunk = packed[start : start + protocol.CHUNK_BYTES]
            await self.ws.send(protocol.frame(task_id, chunk))
        await self.send(protocol.message("body_end", task_id=task_id))


async def _connect(url: str, **kwargs: Any) -> RawAgent:
    ws = await connect(url, max_size=protocol.MAX_MESSAGE_BYTES, **kwargs)
    return RawAgent(ws)


async def _closed(agent: RawAgent) -> tuple[int, str]:
    """Wait for the server to close the connection; its close code and reason."""

    async def drain() -> None:
        async with asyncio.timeout(TIMEOUT):
            while True:
                await agent.ws.recv()

    with pytest.raises(ConnectionClosed) as info:
        await drain()
    rcvd = info.value.rcvd
    assert rcvd is not None
    return rcvd.code, rcvd.reason


async def test_wrong_missing_and_revoked_tokens_are_refused_saying_nothing_more(
    server: tuple[str, Database, Any],
) -> None:
    url, db, _ = server
    agent, token = await admin.create_agent(db, "home-1")
    for bad in ["fga_wrong-token-of-the-right-length-000000000000", "", None]:
        raw = await _connect(url)
        await raw.send(protocol.message("hello", token=bad, agent_version="test"))
        assert await _closed(raw) == (protocol.CLOSE_UNAUTHORIZED, "authentication failed")
    # Not JSON, not a hello, a version this server does not speak.
    raw = await _connect(url)
    await raw.ws.send("hello?")
    code, reason = await _closed(raw)
    assert code == protocol.CLOSE_PROTOCOL and "hello" in reason
    raw = await _connect(url)
    await raw.send({"type": "hello", "v": 99, "token": token, "agent_version": "x"})
    code, reason = await _closed(raw)
    assert code == protocol.CLOSE_PROTOCOL and "version" in reason and token not in reason
    # The header works as well as the message.
    raw = await _connect(url, additional_headers={"Authorization": f"Bearer {token}"})
    welcome = await raw.hello(None)
    assert welcome["type"] == "welcome" and welcome["agent_id"] == agent.id
    assert welcome["v"] == protocol.VERSION
    # Revoking closes the live connection, and the token is refused from then on.
    await admin.revoke_agent(db, agent.id)
    assert (await _closed(raw))[0] == protocol.CLOSE_UNAUTHORIZED
    raw = await _connect(url)
    await raw.send(protocol.message("hello", token=token, agent_version="test"))
    assert await _closed(raw) == (protocol.CLOSE_UNAUTHORIZED, "authentication failed")
    events = await entity_events(db, "agent", agent.id)
    assert events[:3] == ["created", "connected", "revoked"]


async def test_a_task_round_trip_stores_the_page_and_parses_it(
    server: tuple[str, Database, Any], make_settings: SettingsFactory, site: TestSite
) -> None:
    url, db, app = server
    agent, token = await admin.create_agent(db, "home-1")
    [task_id] = await submit(db, make_settings(), site.url("/product/7"))
    raw = await _connect(url)
    assert (await raw.hello(token, capabilities={"concurrency": 1}))["status"] == "connected"
    task = await raw.recv("task")
    assert task["task_id"] == task_id and task["url"] == site.url("/product/7")
    async with db.reader() as session:
        assert (await session.get(Agent, agent.id)).status == "busy"  # type: ignore[union-attr]
    page = httpx.get(task["url"]).content
    await raw.send(protocol.message("sent", task_id=task_id))
    await raw.result(task_id, page, url=task["url"])
    assert (await raw.recv("ack")) == {
        "type": "ack",
        "v": 1,
        "task_id": task_id,
        "outcome": "completed",
    }
    await raw.send(protocol.message("heartbeat", external_ip="203.0.113.7", isp="Vivo"))
    assert (await raw.recv("heartbeat_ack"))["status"] == "connected"
    tasks = await tasks_by_id(db, [task_id])
    assert tasks[task_id].status == "completed"
    async with db.reader() as session:
        product = await session.scalar(select(Product).where(Product.crawl_task_id == task_id))
        attempt = await session.scalar(select(CrawlAttempt).where(CrawlAttempt.task_id == task_id))
        row = await session.get(Agent, agent.id)
    assert product is not None and product.product_name
    assert attempt is not None and attempt.worker_id.startswith(f"agent:{agent.id}:")
    assert attempt.bytes_received == len(page)
    assert row is not None
    assert (row.status, row.tasks_completed_count, row.tasks_failed_count) == ("connected", 1, 0)
    assert (row.external_ip, row.isp_name) == ("203.0.113.7", "Vivo")
    stored = await app.state.runtime.hub.pages.get(tasks[task_id].html_path)
    assert stored == page
    await raw.ws.close()

    async def disconnected() -> bool:
        return (await entity_events(db, "agent", agent.id))[-1] == "disconnected"

    await eventually(disconnected, "the agent to be marked disconnected")
    assert await entity_events(db, "agent", agent.id) == [
        "created",
        "connected",
        "busy",
        "connected",
        "disconnected",
    ]


async def test_results_for_cancelled_or_reassigned_tasks_are_discarded(
    server: tuple[str, Database, Any], make_settings: SettingsFactory, site: TestSite
) -> None:
    url, db, _ = server
    settings = make_settings()
    _, token_a = await admin.create_agent(db, "agent-a")
    _, token_b = await admin.create_agent(db, "agent-b")
    cancelled_id, moved_id = await submit(
        db, settings, site.url("/product/1"), site.url("/product/2")
    )
    a = await _connect(url)
    await a.hello(token_a, capabilities={"concurrency": 2})
    first, second = await a.recv("task"), await a.recv("task")
    held = {first["task_id"]: first, second["task_id"]: second}
    assert set(held) == {cancelled_id, moved_id}

    # An operator cancels one task while agent A fetches it.
    async with db.session() as session:
        await session.execute(
            update(CrawlTask).where(CrawlTask.id == cancelled_id).values(status="cancelled")
        )
    # A's lease on the other expires (A looks hung) and agent B gets the task.
    async with db.session() as session:
        await session.execute(
            update(CrawlTask)
            .where(CrawlTask.id == moved_id)
            .values(lease_expires_at=utcnow() - timedelta(hours=1))
        )
    # The server's own scheduler reaps expired leases too (every 0.2 s here) and may be first:
    # a reaper skips the rows another holds (SKIP LOCKED), so this one can return before the
    # server's has committed the move.
    await TaskQueue(db, settings).reap_expired_leases()

    async def pending() -> bool:
        return (await tasks_by_id(db, [moved_id]))[moved_id].status == "pending"

    await eventually(pending, "the expired lease to be reaped")
    b = await _connect(url)
    await b.hello(token_b)
    task_b = await b.recv("task")
    assert task_b["task_id"] == moved_id

    # A's late results change nothing.
    for task_id, task in held.items():
        await a.result(task_id, httpx.get(task["url"]).content)
        assert (await a.recv("ack"))["outcome"] == "discarded"
    # B's result for the same task counts.
    await b.result(moved_id, httpx.get(task_b["url"]).content)
    assert (await b.recv("ack"))["outcome"] == "completed"

    tasks = await tasks_by_id(db, [cancelled_id, moved_id])
    assert tasks[cancelled_id].status == "cancelled"
    assert tasks[moved_id].status == "completed"
    async with db.reader() as session:
        products = list(await session.scalars(select(Product.crawl_task_id)))
        completions = list(
            await session.scalars(
                select(Event.entity_id).where(
                    Event.entity_type == "task", Event.event == "completed"
                )
            )
        )
        attempts = (
            await session.execute(
                select(CrawlAttempt.worker_id, CrawlAttempt.outcome, CrawlAttempt.error_type)
                .where(CrawlAttempt.task_id == moved_id)
                .order_by(CrawlAttempt.id)
            )
        ).all()
    assert products == [moved_id]
    assert completions == [str(moved_id)]
    # A's try, lost when its lease expired; A's late result, discarded; B's, which counts.
    assert [(a.outcome, a.error_type) for a in attempts] == [
        ("retry", "lease_expired"),
        ("discarded", None),
        ("success", None),
    ]
    assert attempts[0].worker_id == attempts[1].worker_id != attempts[2].worker_id


async def test_oversize_bodies_and_messages_are_refused_not_buffered(
    server: tuple[str, Database, Any], make_settings: SettingsFactory, site: TestSite
) -> None:
    url, db, _ = server
    settings = make_settings()
    limit = 256 * 1024
    _, token = await admin.create_agent(db, "home-1")
    declared_id, streamed_id = await submit(
        db, settings, site.url("/product/1"), site.url("/product/2"), max_retries=0
    )
    raw = await _connect(url)
    await raw.hello(token, capabilities={"concurrency": 2})
    tasks = {(await raw.recv("task"))["task_id"] for _ in range(2)}
    assert tasks == {declared_id, streamed_id}
    # Declared too large: refused at once; the chunks that follow are dropped.
    await raw.result(declared_id, b"x" * 1000, declared=limit + 1)
    assert (await raw.recv("ack"))["outcome"] == "failed"
    # Declared small but inflating past the limit (a gzip bomb): refused mid-stream.
    await raw.result(streamed_id, b"\0" * (limit * 4), declared=1000)
    assert (await raw.recv("ack"))["outcome"] == "failed"
    done = await tasks_by_id(db, [declared_id, streamed_id])
    assert {t.error_type for t in done.values()} == {"too_large"}
    assert {t.status for t in done.values()} == {"failed"}
    # The connection is still usable.
    await raw.send(protocol.message("heartbeat"))
    assert (await raw.recv("heartbeat_ack"))["type"] == "heartbeat_ack"
    # One message over the WebSocket limit closes the connection (1009: message too big).
    await raw.ws.send("x" * (protocol.MAX_MESSAGE_BYTES + 1))
    assert (await _closed(raw))[0] == 1009
    async with db.reader() as session:
        assert await session.scalar(select(func.count()).select_from(Product)) == 0


async def test_garbage_messages_get_an_error_and_the_connection_survives(
    server: tuple[str, Database, Any],
) -> None:
    url, db, _ = server
    _, token = await admin.create_agent(db, "home-1")
    raw = await _connect(url)
    await raw.hello(token)
    await raw.ws.send("{not json")
    assert "not JSON" in (await raw.recv("error"))["message"]
    await raw.send({"type": "result", "v": 1, "task_id": "x", "ok": True})
    assert "task_id" in (await raw.recv("error"))["message"]
    await raw.send({"type": "teleport", "v": 1})
    assert (await raw.recv("error"))["type"] == "error"
    await raw.ws.send(b"\x01")
    assert "8-byte" in (await raw.recv("error"))["message"]
    await raw.send(protocol.message("heartbeat"))
    assert (await raw.recv("heartbeat_ack"))["status"] == "connected"


async def test_agents_are_offered_only_allowed_domains_they_can_fetch(
    server: tuple[str, Database, Any], make_settings: SettingsFactory, site: TestSite
) -> None:
    url, db, _ = server
    settings = make_settings()
    _, token = await admin.create_agent(db, "home-1")
    # What it may not have is first in line: being passed over is what the test shows.
    browser_id, other_id = await submit(
        db,
        settings,
        site.url("/product/2", host="127.0.0.2"),
        site.url("/product/3", host="127.0.0.3"),
        priority=1,
    )
    [ok_id] = await submit(db, settings, site.url("/product/1", host="127.0.0.1"))
    async with db.session() as session:
        await session.execute(
            update(Domain).where(Domain.domain_name == "127.0.0.2").values(fetcher="browser")
        )
    raw = await _connect(url)
    await raw.hello(
        token,
        capabilities={
            "concurrency": 4,
            "fetchers": ["http"],
            "allow_domains": ["127.0.0.1", "127.0.0.2"],
        },
    )
    task = await raw.recv("task")
    assert task["task_id"] == ok_id
    await raw.result(ok_id, httpx.get(task["url"]).content)
    assert (await raw.recv("ack"))["outcome"] == "completed"
    # Claimed again after the result, it is still passed over for the task behind them.
    [later_id] = await submit(db, settings, site.url("/product/4", host="127.0.0.1"))
    assert (await raw.recv("task"))["task_id"] == later_id
    tasks = await tasks_by_id(db, [browser_id, other_id])
    assert {t.status for t in tasks.values()} == {"pending"}


async def test_robots_txt_is_honoured_before_a_task_goes_to_an_agent(
    server: tuple[str, Database, Any], make_settings: SettingsFactory, site: TestSite
) -> None:
    url, db, _ = server
    _, token = await admin.create_agent(db, "home-1")
    private_id, product_id = await submit(
        db, make_settings(), site.url("/private/1"), site.url("/product/1"), priority=1
    )
    raw = await _connect(url)
    await raw.hello(token)
    task = await raw.recv("task")
    assert task["task_id"] == product_id
    denied = (await tasks_by_id(db, [private_id]))[private_id]
    assert (denied.status, denied.error_type) == ("failed", "robots_denied")
    assert not [r for r in site.requests() if r.path.startswith("/private/")]
