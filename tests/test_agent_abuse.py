"""What an authenticated but hostile agent can cost the server (issue 11): spraying unknown task
ids, hoarding tasks while its heartbeats keep their leases alive, looping claim and `return`.

Spoken by hand over a real WebSocket to the real app on loopback, like test_agents_ws.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import func, select

from forager.agents import admin, protocol
from forager.agents import connection as agent_connection
from forager.agents import hub as agent_hub
from forager.db.models import CrawlAttempt, CrawlTask, Event
from forager.queue.door import TaskQueue
from tests.conftest import SettingsFactory
from tests.support.agents import app_server
from tests.support.crawling import submit
from tests.support.site import TestSite
from tests.support.waiting import eventually
from tests.test_agents_ws import _closed, _connect


async def test_spraying_unknown_task_ids_is_bounded_then_closes_the_connection(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(serve_workers=0)
    async with app_server(settings) as (base, app):
        db, hub = app.state.runtime.db, app.state.runtime.hub
        agent, token = await admin.create_agent(db, "sprayer")
        raw = await _connect(protocol.ws_url(base))
        await raw.hello(token, capabilities={"concurrency": 1})
        conn = hub.connections[agent.id]
        # Body frames and results for tasks it never held: each is dropped, none is kept
        # beyond the bound, and past the limit the connection is closed.
        for n in range(agent_hub._UNKNOWN_LIMIT // 2):
            await raw.ws.send(protocol.frame(10_000_000 + n, b"x" * 64))
        for n in range(agent_hub._UNKNOWN_LIMIT // 2):
            await raw.result(20_000_000 + n, b"")
        await eventually(
            lambda: conn.unknown >= agent_hub._UNKNOWN_LIMIT, "the strikes to be counted"
        )
        assert len(conn.ignored) <= agent_connection.IGNORED_MAX
        assert not conn.dropped  # late frames are tolerated up to the limit
        for n in range(5):
            await raw.ws.send(protocol.frame(30_000_000 + n, b"x"))
        code, reason = await _closed(raw)
        assert code == protocol.CLOSE_PROTOCOL and "does not hold" in reason
        assert agent.id not in hub.connections


async def test_a_hoarding_agent_loses_its_tasks_at_the_deadline_despite_heartbeats(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    # The deadline is 2 × fetch timeout + agent timeout: 2 + 4 = 6 s here.
    settings = make_settings(
        serve_workers=0,
        fetch_timeout_seconds=1.0,
        agent_timeout_seconds=4.0,
        agent_heartbeat_seconds=1.0,
        lease_seconds=60.0,
    )
    async with app_server(settings) as (base, app):
        db, hub = app.state.runtime.db, app.state.runtime.hub
        assert hub.task_deadline_seconds == 6.0
        _, token = await admin.create_agent(db, "hoarder")
        ids = await submit(db, settings, site.url("/product/1"), site.url("/product/2"))
        raw = await _connect(protocol.ws_url(base))
        await raw.hello(token, capabilities={"concurrency": 2})
        held = {(await raw.recv("task"))["task_id"] for _ in ids}
        assert held == set(ids)

        async def beat_until_acked() -> list[dict[str, Any]]:
            """Heartbeats only (the leases stay alive), until both tasks are acked."""
            acks: list[dict[str, Any]] = []
            async with asyncio.timeout(60):
                while len(acks) < len(ids):
                    await raw.send(protocol.message("heartbeat"))
                    try:
                        async with asyncio.timeout(0.5):
                            while True:
                                msg = await raw.recv()
                                if msg["type"] == "ack":
                                    acks.append(msg)
                    except TimeoutError:
                        pass
            return acks

        acks = await beat_until_acked()
        assert {a["task_id"] for a in acks} == set(ids)
        assert {a["outcome"] for a in acks} == {"retry"}
        async with db.reader() as session:
            attempts = (
                await session.execute(
                    select(CrawlAttempt.error_type, CrawlAttempt.error_message).where(
                        CrawlAttempt.task_id.in_(ids)
                    )
                )
            ).all()
            rows = (
                await session.execute(
                    select(CrawlTask.status, CrawlTask.lease_owner).where(CrawlTask.id.in_(ids))
                )
            ).all()
        assert [a.error_type for a in attempts] == ["timeout", "timeout"]
        assert all("within 6 s" in (a.error_message or "") for a in attempts)
        assert {(r.status, r.lease_owner) for r in rows} == {("pending", None)}
        # Its late result changes nothing, and the connection is still fine.
        await raw.result(ids[0], b"<html></html>")
        assert (await raw.recv("ack"))["outcome"] == "discarded"
        await raw.send(protocol.message("heartbeat"))
        assert (await raw.recv("heartbeat_ack"))["type"] == "heartbeat_ack"


async def test_a_claim_and_return_loop_is_cut_off(
    make_settings: SettingsFactory, site: TestSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(serve_workers=0, poll_seconds=0.05)
    release = TaskQueue.release

    async def slow_release(self: TaskQueue, task_id: int, worker_id: str) -> bool:
        await asyncio.sleep(0.3)  # a slow database: the feed loop polls meanwhile
        return await release(self, task_id, worker_id)

    monkeypatch.setattr(TaskQueue, "release", slow_release)
    async with app_server(settings) as (base, app):
        db, hub = app.state.runtime.db, app.state.runtime.hub
        agent, token = await admin.create_agent(db, "returner")
        ids = await submit(db, settings, *(site.url(f"/product/{n}") for n in range(1, 7)))
        raw = await _connect(protocol.ws_url(base))
        await raw.hello(token, capabilities={"concurrency": 1})
        conn = hub.connections[agent.id]
        returned = []
        # Concurrency 1: one return per window is fine (a new task follows), the second cuts
        # the agent off — counted before its slot frees, so not even the slow release lets the
        # feed loop slip a third task in.
        for _ in range(2):
            task = await raw.recv("task")
            returned.append(task["task_id"])
            await raw.send(protocol.message("return", task_id=task["task_id"], reason="busy"))

        async def back_in_queue() -> bool:  # every returned task (its release may still commit)
            async with db.reader() as session:
                pending = await session.scalar(
                    select(func.count())
                    .select_from(CrawlTask)
                    .where(CrawlTask.id.in_(ids), CrawlTask.status == "pending")
                )
            return pending == len(ids)

        await eventually(back_in_queue, "the returned tasks back in the queue")
        # Six tasks are due and the feed loop looks every 50 ms: let it look a few times more
        # (counted, not timed), then it must still have claimed nothing.
        assert conn.claiming is not None
        looks = 0
        room = conn.claiming.room

        def counted_room() -> int:
            nonlocal looks
            looks += 1
            return room()

        conn.claiming.room = counted_room
        await eventually(lambda: looks >= 5, "the feed loop to look for work again")
        async with db.reader() as session:
            events = (
                await session.execute(
                    select(Event.entity_id, Event.event).where(
                        Event.entity_type == "task", Event.event.in_(["queued", "released"])
                    )
                )
            ).all()
        # Two different tasks handed out (the one given back goes behind the others), each
        # handed out once and given back once; none since.
        assert len(set(returned)) == 2
        assert sorted((int(e.entity_id), e.event) for e in events) == sorted(
            [(t, "queued") for t in returned] + [(t, "released") for t in returned]
        )
        # And none on its way: anything sent before the heartbeat's answer arrives before it.
        await raw.send(protocol.message("heartbeat"))
        while (msg := await raw.recv())["type"] != "heartbeat_ack":
            assert msg["type"] != "task", msg
        await raw.ws.close()
