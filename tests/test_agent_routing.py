"""Issue 33: domains whose tasks go to home-network agents. ``agents_only`` tasks are never
claimed by workers and wait, with the reason shown, while no agent is connected;
``agents_preferred`` tasks go to workers only while no agent is connected; a real
``forager agent run`` process serves an ``agents_only`` domain next to the built-in workers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from forager.agents import admin as agents_admin
from forager.agents.client import AgentClient, available_fetchers
from forager.apikeys import create_key
from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Agent, CrawlAttempt, Domain
from forager.db.types import utcnow
from forager.politeness.waits import DomainFacts, why
from forager.queue.door import TaskQueue
from forager.queue.routing import LIVE_AGENT
from tests.conftest import SettingsFactory
from tests.support.agents import AgentProcess, all_logs, app_server, reap_started
from tests.support.crawling import submit, tasks_by_id
from tests.support.site import TestSite
from tests.support.waiting import eventually


async def _route(db: Database, host: str, routing: str, **values: Any) -> None:
    async with db.session() as session:
        await session.execute(
            update(Domain).where(Domain.domain_name == host).values(routing=routing, **values)
        )


async def _connect(db: Database, name: str, *, seconds_ago: float = 0.0) -> None:
    """An agent row as the hub leaves it for a live connection (heartbeat ``seconds_ago``)."""
    agent, _ = await agents_admin.create_agent(db, name)
    async with db.session() as session:
        await session.execute(
            update(Agent)
            .where(Agent.id == agent.id)
            .values(status="connected", last_heartbeat_at=utcnow() - timedelta(seconds=seconds_ago))
        )


async def _three_domains(db: Database, settings: Settings) -> dict[str, int]:
    hosts = {"any": "any.test", "agents_preferred": "pref.test", "agents_only": "only.test"}
    ids = {}
    for routing, host in hosts.items():
        [ids[routing]] = await submit(db, settings, f"http://{host}/p")
        await _route(db, host, routing)
    return ids


def _claimed_routings(claimed: list[Any], ids: dict[str, int]) -> set[str]:
    by_id = {task_id: routing for routing, task_id in ids.items()}
    return {by_id[t.id] for t in claimed}


def test_the_live_statuses_are_the_agents_own() -> None:
    assert set(LIVE_AGENT) == {str(s) for s in agents_admin.LIVE}


async def test_workers_never_claim_agents_only_and_claim_preferred_while_no_agent_is_up(
    db: Database, settings: Settings
) -> None:
    queue = TaskQueue(db, settings)
    ids = await _three_domains(db, settings)
    # No agent connected: workers take `any` and `agents_preferred`, never `agents_only`.
    claimed = await queue.claim("worker-1", 10)
    assert _claimed_routings(claimed, ids) == {"any", "agents_preferred"}
    assert await queue.claim("worker-1", 10) == []
    for task in claimed:
        assert await queue.release(task.id, "worker-1")

    # An agent whose last heartbeat is older than the agent timeout is not connected.
    await _connect(db, "stale", seconds_ago=settings.agent_timeout_seconds + 5)
    claimed = await queue.claim("worker-1", 10)
    assert _claimed_routings(claimed, ids) == {"any", "agents_preferred"}
    for task in claimed:
        assert await queue.release(task.id, "worker-1")

    # An agent connected: workers keep only `any`; the agent may take all three.
    await _connect(db, "home-1")
    assert _claimed_routings(await queue.claim("worker-1", 10), ids) == {"any"}
    agent_claim = await queue.claim("agent:1:x", 10, by_agent=True)
    assert _claimed_routings(agent_claim, ids) == {"agents_preferred", "agents_only"}


async def test_an_auto_domain_goes_to_agents_with_the_fetcher_auto_remembers(
    db: Database, settings: Settings
) -> None:
    """An ``auto`` domain is fetched by an agent with the fetcher auto last remembered (http
    until the workers learn otherwise): an agent without it does not claim the task."""
    queue = TaskQueue(db, settings)
    [task_id] = await submit(db, settings, "http://auto.test/p")
    await _route(db, "auto.test", "agents_only", fetcher="auto")
    [claimed] = await queue.claim("agent:1:a", 10, fetchers=["http"], by_agent=True)
    assert (claimed.id, claimed.fetcher, claimed.rung) == (task_id, "auto", None)
    assert await queue.release(task_id, "agent:1:a")

    await _route(db, "auto.test", "agents_only", fetcher="auto", auto_fetcher="browser")
    assert await queue.claim("agent:1:a", 10, fetchers=["http", "impersonate"], by_agent=True) == []
    [claimed] = await queue.claim("agent:2:b", 10, fetchers=["http", "browser"], by_agent=True)
    assert claimed.rung == "browser"


def _facts(**values: Any) -> DomainFacts:
    base: dict[str, Any] = {
        "domain": "only.test",
        "pending": 3,
        "due": 3,
        "in_flight": 0,
        "is_active": True,
        "crawl_delay": 0.0,
        "throttle_delay": None,
        "robots_delay": None,
        "max_concurrent": 4,
        "breaker_open_until": None,
        "needs_proxy": False,
        "usable_proxies": 0,
        "next_due_at": None,
        "workers": 2,
        "worker_slots": 8,
        "workers_in_flight": 8,
        "agents_connected": 0,
        "agents_known": 1,
    }
    return DomainFacts(**(base | values))


def test_the_wait_names_the_missing_agent_whatever_workers_run() -> None:
    now = utcnow()
    wait = why(_facts(routing="agents_only"), now)
    assert wait.reason == "no_agent" and "agents only" in wait.message
    assert wait.max_pages_per_second == 0.0
    # With an agent connected, busy workers are not what holds an agents-only domain back.
    assert why(_facts(routing="agents_only", agents_connected=1), now).reason == "none"
    assert why(_facts(routing="any"), now).reason == "workers_busy"
    # agents_preferred with no agent connected: the workers take it, so theirs is the limit.
    assert why(_facts(routing="agents_preferred"), now).reason == "workers_busy"


def test_an_agent_advertises_the_fetchers_its_machine_has(tmp_path: Path) -> None:
    assert available_fetchers(tmp_path / "no-chromium") == ["http", "impersonate"]
    chromium = tmp_path / "chromium"
    chromium.write_text("#!/bin/sh\n")
    chromium.chmod(0o755)
    assert available_fetchers(chromium) == ["http", "impersonate", "browser"]
    client = AgentClient("http://127.0.0.1:1", "t", fetchers=["impersonate"])
    assert client.fetchers == ["impersonate"]
    with pytest.raises(ValueError, match="unknown fetcher 'curl'"):
        AgentClient("http://127.0.0.1:1", "t", fetchers=["curl"])


# -- a real agent process ----------------------------------------------------------------------


@pytest.fixture
def _no_process_left() -> Iterator[None]:
    yield
    reap_started()


@pytest.mark.usefixtures("_no_process_left")
# The test-time budget: the claim's routing rule runs on both engines above; the processes run on
# PostgreSQL, the engine of multi-process deployments.
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_an_agents_only_domain_is_served_by_a_real_agent_process_alone(
    make_settings: SettingsFactory, db_url: str, site: TestSite, tmp_path: Path
) -> None:
    """Built-in workers run and crawl an ordinary domain; the ``agents_only`` one (fetched with
    ``impersonate``) waits with ``no_agent`` until a ``forager agent run`` process connects, and
    then every one of its fetches is the agent's."""
    settings = make_settings(serve_workers=1, agent_heartbeat_seconds=0.5)
    only, plain = "127.0.0.4", "127.0.0.5"
    async with app_server(settings) as (url, app):
        db: Database = app.state.runtime.db
        _, token = await agents_admin.create_agent(db, "home-1")
        _, key = await create_key(db, "ops", "admin")
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=20
        ) as api:
            for host, extra in (
                (only, {"routing": "agents_only", "fetcher": "impersonate"}),
                (plain, {}),
            ):
                base = site.url("/", host=host).rstrip("/")
                body = {"domain_name": host, "base_url": base, "crawl_delay_seconds": 0, **extra}
                response = await api.post("/api/domains", json=body)
                assert response.status_code == 201, response.text
                assert response.json()["routing"] == extra.get("routing", "any")
            only_ids = await submit(
                db, settings, *[site.url(f"/product/{n}", host=only) for n in range(2)]
            )
            only_ids += await submit(db, settings, site.url("/echo-headers", host=only))
            plain_ids = await submit(db, settings, site.url("/product/1", host=plain))

            async def done(ids: list[int]) -> bool:
                # Ended: the JSON of /echo-headers is no product page, so its task fails.
                tasks = await tasks_by_id(db, ids)
                return all(t.status in ("completed", "failed") for t in tasks.values())

            await eventually(lambda: done(plain_ids), "the built-in workers' tasks")

            async def waiting_for_an_agent() -> dict[str, Any] | None:
                progress = (await api.get("/api/progress")).json()
                found = [d for d in progress["domains"] if d["domain"] == only]
                return found[0] if found and found[0]["reason"] == "no_agent" else None

            wait = await eventually(waiting_for_an_agent, "the agents-only domain's wait")
            assert wait["pending"] == 3 and "agents only" in wait["message"]
            assert not site.requests(host=only)  # no worker went near it

            fetchers = ("--fetcher", "http", "--fetcher", "impersonate")
            agent = AgentProcess(url, token, tmp_path / "agent.log", *fetchers)
            try:
                await eventually(
                    lambda: done(only_ids),
                    "the agent's tasks",
                    timeout=60,
                    context=lambda: all_logs(agent),
                )
            finally:  # the server in this event loop records the agent's last results
                assert await agent.astop() == 0
        statuses = {t.id: t.status for t in (await tasks_by_id(db, only_ids + plain_ids)).values()}
        async with db.reader() as session:
            rows = await session.execute(
                select(CrawlAttempt.task_id, CrawlAttempt.worker_id).where(
                    CrawlAttempt.task_id.in_(only_ids + plain_ids)
                )
            )
            fetched_by: dict[int, str] = {row.task_id: row.worker_id for row in rows}
    assert [statuses[t] for t in only_ids + plain_ids] == [
        "completed",
        "completed",
        "failed",
        "completed",
    ]
    assert all(fetched_by[t].startswith("agent:") for t in only_ids), fetched_by
    assert not any(fetched_by[t].startswith("agent:") for t in plain_ids), fetched_by
    # The agent fetched with the domain's fetcher: curl_cffi's Chrome sends its client hints.
    [(_, headers)] = [e for e in site.state.echoed if e[0] == only]
    assert "sec-ch-ua" in headers
