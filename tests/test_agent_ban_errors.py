"""A block page an agent gets as an HTTP error (403 "Access denied") blocks the agent, like a
CAPTCHA page served with 200 does; a plain 404 does not.

The real agent program (``AgentClient``) and the real app talk over a WebSocket on loopback;
the agent fetches from the loopback test site, whose ``/status/403`` page is titled
"403 Forbidden" (an access-denied page to the ban checks of ``politeness/bans.py``).
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from forager.agents import admin, protocol
from forager.agents.client import AgentClient
from forager.apikeys import create_key
from forager.db.engine import Database
from forager.db.models import Agent
from tests.conftest import SettingsFactory
from tests.support.agents import app_server
from tests.support.crawling import submit, tasks_by_id
from tests.support.site import TestSite
from tests.support.waiting import entity_events, eventually

TIMEOUT = 20
BAN_HOST = "127.0.0.2"  # its own domain, so its failures touch no other task's domain


@pytest.fixture
async def server(make_settings: SettingsFactory) -> AsyncIterator[tuple[str, Database]]:
    settings = make_settings(serve_workers=0, agent_heartbeat_seconds=0.5)
    async with app_server(settings) as (url, app):
        yield url, app.state.runtime.db


async def _agent(db: Database, agent_id: int) -> Agent:
    async with db.reader() as session:
        row = await session.get(Agent, agent_id)
    assert row is not None
    return row


async def _all(db: Database, ids: list[int], status: str) -> bool:
    return all(t.status == status for t in (await tasks_by_id(db, ids)).values())


def _start(url: str, token: str) -> tuple[AgentClient, asyncio.Task[int]]:
    client = AgentClient(url, token, concurrency=1, backoff_max=1.0)
    return client, asyncio.create_task(client.run())


async def _stop(client: AgentClient, runner: asyncio.Task[int]) -> None:
    client.stop()
    async with asyncio.timeout(TIMEOUT):
        assert await runner == 0


async def test_a_403_block_page_blocks_the_agent_until_reset(
    server: tuple[str, Database], make_settings: SettingsFactory, site: TestSite
) -> None:
    url, db = server
    settings = make_settings()
    agent, token = await admin.create_agent(db, "home-1")
    _, key = await create_key(db, "ops", "admin")
    [ban_id] = await submit(db, settings, site.url("/status/403", host=BAN_HOST), max_retries=0)
    client, runner = _start(url, token)
    try:
        await eventually(lambda: _blocked(db, agent.id), "the agent to be blocked")
        row = await _agent(db, agent.id)
        assert row.blocked_reason is not None and row.blocked_reason.startswith("blocked:")
        task = (await tasks_by_id(db, [ban_id]))[ban_id]
        assert (task.status, task.error_type, task.http_status_code) == ("failed", "blocked", 403)
        assert "'Access Denied' page" in (task.error_message or "")

        # Still connected, but given nothing: these wait for the reset.
        later = await submit(db, settings, site.url("/product/1"), site.url("/product/2"))
        seen = row.last_heartbeat_at
        assert seen is not None

        async def heartbeats_went_on() -> bool:
            current = (await _agent(db, agent.id)).last_heartbeat_at
            return current is not None and (current - seen).total_seconds() >= 1

        await eventually(heartbeats_went_on, "more heartbeats")
        assert await _all(db, later, "pending")
        assert not [r for r in site.requests() if r.path.startswith("/product/")]
        assert (await _agent(db, agent.id)).status == "blocked"

        async with httpx.AsyncClient(timeout=TIMEOUT) as http:
            response = await http.post(
                f"{url}/api/agents/{agent.id}/reset", headers={"Authorization": f"Bearer {key}"}
            )
        assert response.status_code == 200 and response.json()["status"] == "connected"
        await eventually(lambda: _all(db, later, "completed"), "the tasks after the reset")
        await _counted(db, agent.id, completed=2, failed=1)
    finally:
        await _stop(client, runner)
    events = await entity_events(db, "agent", agent.id)
    assert events[:5] == ["created", "connected", "busy", "blocked", "reset"]


async def test_a_plain_404_does_not_block_the_agent(
    server: tuple[str, Database], make_settings: SettingsFactory, site: TestSite
) -> None:
    url, db = server
    settings = make_settings()
    agent, token = await admin.create_agent(db, "home-1")
    [missing_id] = await submit(db, settings, site.url("/status/404", host=BAN_HOST))
    client, runner = _start(url, token)
    try:
        await eventually(lambda: _all(db, [missing_id], "failed"), "the 404 to fail")
        [after_id] = await submit(db, settings, site.url("/product/3"))
        await eventually(lambda: _all(db, [after_id], "completed"), "the next task")
        await _counted(db, agent.id, completed=1, failed=1)
    finally:
        await _stop(client, runner)
    task = (await tasks_by_id(db, [missing_id]))[missing_id]
    assert (task.error_type, task.http_status_code, task.retry_count) == ("http_4xx", 404, 0)
    row = await _agent(db, agent.id)
    assert row.blocked_reason is None
    assert "blocked" not in await entity_events(db, "agent", agent.id)


async def test_the_ban_is_retried_by_another_agent_and_old_agents_still_work(
    server: tuple[str, Database], make_settings: SettingsFactory, site: TestSite
) -> None:
    """Spoken by hand: the retry is counted and goes to another agent; a result without the
    error page (an older agent) is a plain HTTP error, as before."""
    url, db = server
    _, token_a = await admin.create_agent(db, "agent-a")
    agent_b, token_b = await admin.create_agent(db, "agent-b")
    page_url = site.url("/status/403", host=BAN_HOST)
    [task_id] = await submit(db, make_settings(), page_url, max_retries=2)
    block_page = httpx.get(page_url).content
    assert b"403 Forbidden" in block_page

    a = await _connect(url, token_a)
    assert (await _recv(a, "task"))["task_id"] == task_id
    await _error_result(a, task_id, block_page)
    # Blocked before it was free again: no task comes in between, not even this one's retry.
    ack, status = await _next(a), await _next(a)
    assert (ack["type"], status["type"]) == ("ack", "status"), (ack, status)
    assert ack["outcome"] == "retry"
    assert status["status"] == "blocked" and "blocked" in status["reason"]
    task = (await tasks_by_id(db, [task_id]))[task_id]  # the ack came after the commit
    assert (task.status, task.error_type, task.retry_count) == ("pending", "blocked", 1)

    b = await _connect(url, token_b)
    assert (await _recv(b, "task"))["task_id"] == task_id  # not agent A's any more
    await _error_result(b, task_id, None)  # an older agent: no headers, no body
    assert (await _recv(b, "ack"))["outcome"] == "failed"
    task = (await tasks_by_id(db, [task_id]))[task_id]
    assert (task.status, task.error_type, task.retry_count) == ("failed", "http_4xx", 1)
    await b.send(json.dumps(protocol.message("heartbeat")))
    assert (await _recv(b, "heartbeat_ack"))["status"] == "connected"
    assert (await _agent(db, agent_b.id)).blocked_reason is None
    await a.close()
    await b.close()


async def _blocked(db: Database, agent_id: int) -> bool:
    return (await _agent(db, agent_id)).status == "blocked"


async def _connect(url: str, token: str) -> ClientConnection:
    ws = await connect(protocol.ws_url(url), max_size=protocol.MAX_MESSAGE_BYTES)
    await ws.send(json.dumps(protocol.message("hello", token=token, agent_version="test")))
    assert (await _recv(ws, "welcome"))["status"] == "connected"
    return ws


async def _recv(ws: ClientConnection, kind: str) -> dict[str, Any]:
    async with asyncio.timeout(TIMEOUT):
        while (msg := await _next(ws))["type"] != kind:
            pass
        return msg


async def _next(ws: ClientConnection) -> dict[str, Any]:
    async with asyncio.timeout(TIMEOUT):
        msg: dict[str, Any] = json.loads(await ws.recv())
        return msg


async def _error_result(ws: ClientConnection, task_id: int, body: bytes | None) -> None:
    """A failed ``result`` for a 403; with ``body``, its headers and gzip body follow."""
    fields: dict[str, Any] = {}
    if body is not None:
        fields = {"headers": {"content-type": "text/html"}, "body_bytes": len(body)}
    await ws.send(
        json.dumps(
            protocol.message(
                "result",
                task_id=task_id,
                ok=False,
                status_code=403,
                error_type="http_4xx",
                message="HTTP 403",
                **fields,
            )
        )
    )
    if body:
        await ws.send(protocol.frame(task_id, zlib.compress(body, 6, 31)))
        await ws.send(json.dumps(protocol.message("body_end", task_id=task_id)))


async def _counted(db: Database, agent_id: int, *, completed: int, failed: int) -> None:
    """The agent's counters reach these (they follow each task's own write), and stay there."""

    async def reached() -> bool:
        row = await _agent(db, agent_id)
        return row.tasks_completed_count + row.tasks_failed_count >= completed + failed

    await eventually(reached, "the agent's task counters")
    row = await _agent(db, agent_id)
    assert (row.tasks_completed_count, row.tasks_failed_count) == (completed, failed)
