"""Real `forager agent run` processes against a real `forager serve`, fetching from the test
site in its own process: round trip, revocation, crashes, stalls, blocks, restarts, scale.

The round trip runs on both engines; each other scenario on one (PostgreSQL where agents claim
side by side or leases move), since its SQL is the in-process tests' (test_agents_ws.py,
test_agent_ban_errors.py, test_agent_abuse.py), which run on both: a process each costs
seconds."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from forager.agents import admin
from forager.apikeys import create_key
from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Agent, CrawlAttempt, CrawlTask, Event, Product
from tests.conftest import SettingsFactory
from tests.support.agents import (
    AgentProcess,
    InProcessServe,
    ServeProcess,
    agent_args,
    all_logs,
    app_server,
    reap_started,
)
from tests.support.crawling import submit, tasks_by_id
from tests.support.site import SiteProcess
from tests.support.waiting import Check, completions, event_details, eventually

pytestmark = pytest.mark.slow

SITE_HOSTS = [f"127.0.0.{n}" for n in range(40, 60)]
SITE_PROCESS_HOSTS = SITE_HOSTS  # `site` is then the test site in its own process, on these


@pytest.fixture(autouse=True)
def _no_process_left() -> Iterator[None]:
    yield
    reap_started()


def process_settings(make_settings: SettingsFactory, **overrides: float) -> Settings:
    """Settings for a server with agent processes. A fetch may take 30 s: on a loaded machine
    the site's answers can be slow, and a timed-out fetch would be retried, which is not what
    these tests are about."""
    values: dict[str, float] = {
        "agent_heartbeat_seconds": 1.0,
        "agent_timeout_seconds": 10.0,
        "heartbeat_seconds": 1.0,
        "lease_seconds": 60.0,
        "fetch_timeout_seconds": 30.0,
        "serve_workers": 0,
    }
    return make_settings(**(values | overrides))


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return process_settings(make_settings)


@pytest.fixture
def serve_process(settings: Settings, tmp_path: Path) -> Iterator[ServeProcess]:
    """A real `forager serve` process (slow to start on a loaded machine: used where it matters)."""
    server = ServeProcess(settings, tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def serve(settings: Settings) -> AsyncIterator[InProcessServe]:
    """The same app on uvicorn inside the test process (agents still run as processes)."""
    async with app_server(settings) as (url, _):
        yield InProcessServe(url)


async def wait_for(
    check: Check,
    what: str,
    procs: list[AgentProcess | ServeProcess | InProcessServe],
    timeout: float = 90,
) -> None:
    """``eventually``, failing with the processes' logs."""
    await eventually(check, what, timeout=timeout, every=0.1, context=lambda: all_logs(*procs))


async def count(db: Database, *where: object) -> int:
    async with db.reader() as session:
        return int(
            await session.scalar(select(func.count()).select_from(CrawlTask).where(*where)) or 0  # type: ignore[arg-type]
        )


async def agent_row(db: Database, agent_id: int) -> Agent:
    async with db.reader() as session:
        row = await session.get(Agent, agent_id)
    assert row is not None
    return row


async def agent_events(db: Database, agent_id: int) -> list[tuple[str, dict[str, object]]]:
    return [(e, d or {}) for e, d in await event_details(db, "agent", agent_id)]


def products(site: SiteProcess, first: int, n: int, hosts: int = 2, query: str = "") -> list[str]:
    return [
        site.url(f"/product/{i}{query}", host=SITE_HOSTS[i % hosts])
        for i in range(first, first + n)
    ]


async def test_round_trip_then_sigterm_finishes_the_task_in_hand(
    db: Database,
    settings: Settings,
    serve_process: ServeProcess,
    site: SiteProcess,
    tmp_path: Path,
) -> None:
    serve = serve_process
    agent, token = await admin.create_agent(db, "home-1")
    ids = await submit(db, settings, *products(site, 0, 10))
    proc = AgentProcess(serve.url, token, tmp_path / "agent.log", "--isp", "Vivo", concurrency=2)
    try:
        await wait_for(lambda: _all(db, ids, "completed"), "10 completed tasks", [proc, serve])

        async def counted() -> bool:  # the agent's counters follow each task's own write
            return (await agent_row(db, agent.id)).tasks_completed_count >= 10

        await wait_for(counted, "the agent's counters", [serve])
        row = await agent_row(db, agent.id)
        assert row.tasks_completed_count == 10 and row.tasks_failed_count == 0
        assert row.external_ip == "127.0.0.1" and row.isp_name == "Vivo"
        async with db.reader() as session:
            assert await session.scalar(select(func.count()).select_from(Product)) == 10
            workers = set(await session.scalars(select(CrawlAttempt.worker_id)))
        assert len(workers) == 1 and workers.pop().startswith(f"agent:{agent.id}:")
        fetched = Counter(r.path for r in site.requests() if r.path.startswith("/product/"))
        assert len(fetched) == 10 and set(fetched.values()) == {1}

        # SIGTERM while a fetch is in hand: the agent finishes it, then exits 0.
        [slow_id] = await submit(db, settings, site.url("/hold/sigterm", host=SITE_HOSTS[3]))
        await wait_for(lambda: site.held("sigterm") == 1, "the fetch in hand", [proc])
        proc.signal(signal.SIGTERM)
        site.release("sigterm")
        assert await proc.exited(30) == 0, proc.log()
    finally:
        proc.kill()
    assert (await tasks_by_id(db, [slow_id]))[slow_id].status == "completed"
    await wait_for(lambda: _status(db, agent.id, "disconnected"), "the agent disconnected", [serve])
    log = proc.log()
    assert "stopping" in log and "task" in log
    assert token not in log and token not in serve.log()
    events = [e for e, _ in await agent_events(db, agent.id)]
    assert events[:3] == ["created", "connected", "busy"] and events[-1] == "disconnected"


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # two agents claim at once
async def test_allow_list_keeps_other_domains_for_other_agents(
    db: Database, settings: Settings, serve: InProcessServe, site: SiteProcess, tmp_path: Path
) -> None:
    a, token_a = await admin.create_agent(db, "only-first-host")
    b, token_b = await admin.create_agent(db, "anything")
    urls = products(site, 100, 8)
    ids = await submit(db, settings, *urls)
    by_host = {i: u.split("/")[2].split(":")[0] for i, u in zip(ids, urls, strict=True)}
    allowed = [SITE_HOSTS[0]]
    pa = AgentProcess(serve.url, token_a, tmp_path / "a.log", *agent_args(allowed))
    try:
        mine = [i for i, host in by_host.items() if host == SITE_HOSTS[0]]
        await wait_for(lambda: _all(db, mine, "completed"), "first-host tasks", [pa, serve])
        assert await count(db, CrawlTask.status == "pending") == len(ids) - len(mine)
        pb = AgentProcess(serve.url, token_b, tmp_path / "b.log")
        try:
            await wait_for(lambda: _all(db, ids, "completed"), "every task", [pa, pb, serve])
        finally:
            assert await pb.astop() == 0
    finally:
        assert await pa.astop() == 0
    async with db.reader() as session:
        rows = (await session.execute(select(CrawlAttempt.task_id, CrawlAttempt.worker_id))).all()
    for task_id, worker in rows:
        if by_host[task_id] != SITE_HOSTS[0]:
            assert worker.startswith(f"agent:{b.id}:")
    assert {w.split(":")[1] for _, w in rows} == {str(a.id), str(b.id)}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the connection, not SQL
async def test_revoking_closes_the_live_connection_and_the_agent_exits(
    db: Database, settings: Settings, serve: InProcessServe, tmp_path: Path
) -> None:
    agent, token = await admin.create_agent(db, "home-1")
    _, key = await create_key(db, "ops", "admin")
    proc = AgentProcess(serve.url, token, tmp_path / "agent.log")
    try:
        await wait_for(lambda: _status(db, agent.id, "connected"), "a connection", [proc, serve])
        response = await _post(f"{serve.url}/api/agents/{agent.id}/revoke", key)
        assert response.status_code == 200, response.text
        assert await proc.exited(30) == 2, proc.log()
    finally:
        proc.kill()
    assert "refused this agent's token" in proc.log()
    row = await agent_row(db, agent.id)
    assert row.revoked_at is not None and row.status == "disconnected"
    # A new start with the same token is refused at once.
    again = AgentProcess(serve.url, token, tmp_path / "again.log")
    assert await again.exited(30) == 2
    assert "refused this agent's token" in again.log()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # leases moved under load
async def test_killed_agent_tasks_are_reassigned_at_once(
    db: Database, settings: Settings, serve: InProcessServe, site: SiteProcess, tmp_path: Path
) -> None:
    doomed, token_a = await admin.create_agent(db, "doomed")
    _, token_b = await admin.create_agent(db, "survivor")
    ids = await submit(
        db,
        settings,
        *[site.url(f"/hold/killed?n={n}", host=SITE_HOSTS[n % 4]) for n in range(6)],
    )
    pa = AgentProcess(serve.url, token_a, tmp_path / "a.log", concurrency=3)
    try:
        await wait_for(lambda: site.held("killed") == 3, "3 fetches in hand", [pa, serve])
        async with db.reader() as session:
            held = set(
                await session.scalars(
                    select(CrawlTask.id).where(CrawlTask.lease_owner.like(f"agent:{doomed.id}:%"))
                )
            )
        assert len(held) == 3
    finally:
        pa.signal(signal.SIGKILL)
        await pa.exited(10)
    await wait_for(lambda: _status(db, doomed.id, "disconnected"), "disconnected", [serve])
    site.release("killed")
    pb = AgentProcess(serve.url, token_b, tmp_path / "b.log", concurrency=6)
    try:
        await wait_for(lambda: _all(db, ids, "completed"), "every task", [pb, serve])
    finally:
        assert await pb.astop() == 0
    done = await completions(db)
    assert set(done) == {str(i) for i in ids} and set(done.values()) == {1}
    tasks = await tasks_by_id(db, ids)
    assert {tasks[i].retry_count for i in held} == {0}  # given back, not expired
    _, details = (await agent_events(db, doomed.id))[-1]
    assert set(details["tasks_reassigned"]) == held  # type: ignore[arg-type]
    async with db.reader() as session:
        expired = await session.scalar(
            select(func.count()).select_from(Event).where(Event.event == "lease_expired")
        )
    assert expired == 0


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # PostgreSQL: the kill above
async def test_silent_agent_times_out_and_its_task_is_reassigned(
    db: Database, make_settings: SettingsFactory, site: SiteProcess, tmp_path: Path
) -> None:
    # A short timeout (four missed heartbeats) keeps the wait for it short.
    settings = process_settings(make_settings, agent_timeout_seconds=4.0)
    stalled, token_a = await admin.create_agent(db, "stalled")
    _, token_b = await admin.create_agent(db, "helper")
    [task_id] = await submit(db, settings, site.url("/hold/silent", host=SITE_HOSTS[5]))
    async with app_server(settings) as (url, _):
        serve = InProcessServe(url)
        pa = AgentProcess(serve.url, token_a, tmp_path / "a.log")
        pb: AgentProcess | None = None
        try:
            await _silent_then_replaced(db, site, serve, pa, stalled.id, task_id)
            site.release("silent")
            pb = AgentProcess(serve.url, token_b, tmp_path / "b.log")
            await wait_for(lambda: _all(db, [task_id], "completed"), "the task", [pb, serve])
            pa.signal(signal.SIGCONT)  # wakes up with a stale result and a dead connection
            await wait_for(
                lambda: _status(db, stalled.id, "connected"), "the stalled agent back", [pa, serve]
            )
        finally:
            pa.signal(signal.SIGCONT)
            assert await pa.astop() == 0
            if pb is not None:
                assert await pb.astop() == 0
    assert (await completions(db))[str(task_id)] == 1
    assert (await tasks_by_id(db, [task_id]))[task_id].status == "completed"


async def _silent_then_replaced(
    db: Database,
    site: SiteProcess,
    serve: InProcessServe,
    agent: AgentProcess,
    agent_id: int,
    task_id: int,
) -> None:
    """The agent stops (SIGSTOP) with the fetch in hand; the server times it out."""
    await wait_for(lambda: site.held("silent") == 1, "the fetch in hand", [agent, serve])
    agent.signal(signal.SIGSTOP)  # alive, connected, silent: no heartbeat, no result
    await wait_for(lambda: _status(db, agent_id, "disconnected"), "heartbeat timeout", [serve])
    event, details = (await agent_events(db, agent_id))[-1]
    assert (event, details["reason"]) == ("disconnected", "heartbeat timeout")
    assert details["tasks_reassigned"] == [task_id]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the protocol, not SQL
async def test_captcha_blocks_the_agent_until_reset(
    db: Database, settings: Settings, serve: InProcessServe, site: SiteProcess, tmp_path: Path
) -> None:
    agent, token = await admin.create_agent(db, "home-1")
    _, key = await create_key(db, "ops", "admin")
    [captcha_id] = await submit(
        db, settings, site.url("/captcha", host=SITE_HOSTS[6]), priority=1, max_retries=0
    )
    later = await submit(db, settings, *products(site, 200, 3), priority=5)
    proc = AgentProcess(serve.url, token, tmp_path / "agent.log")
    try:
        await wait_for(lambda: _status(db, agent.id, "blocked"), "blocked", [proc, serve])
        row = await agent_row(db, agent.id)
        assert row.blocked_reason is not None and "captcha" in row.blocked_reason
        assert (await tasks_by_id(db, [captcha_id]))[captcha_id].error_type == "captcha"
        # Still connected and heartbeating, but given nothing.
        seen = row.last_heartbeat_at
        assert seen is not None

        async def heartbeats_went_on() -> bool:
            current = (await agent_row(db, agent.id)).last_heartbeat_at
            return current is not None and (current - seen).total_seconds() >= 2

        await wait_for(heartbeats_went_on, "more heartbeats", [proc, serve])
        assert await _all(db, later, "pending")
        assert (await agent_row(db, agent.id)).status == "blocked"

        response = await _post(f"{serve.url}/api/agents/{agent.id}/reset", key)
        assert response.status_code == 200 and response.json()["status"] == "connected"
        await wait_for(lambda: _all(db, later, "completed"), "the rest", [proc, serve])
    finally:
        assert await proc.astop() == 0
    events = [e for e, _ in await agent_events(db, agent.id)]
    assert events[:5] == ["created", "connected", "busy", "blocked", "reset"]
    assert "server set this agent blocked" in proc.log()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # the server's pool too
async def test_agent_reconnects_after_the_server_restarts(
    db: Database,
    settings: Settings,
    serve_process: ServeProcess,
    site: SiteProcess,
    tmp_path: Path,
) -> None:
    serve = serve_process
    agent, token = await admin.create_agent(db, "home-1")
    proc = AgentProcess(serve.url, token, tmp_path / "agent.log")
    try:
        first = await submit(db, settings, *products(site, 300, 2))
        await wait_for(lambda: _all(db, first, "completed"), "first tasks", [proc, serve])
        assert serve.stop() in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
        later = await submit(db, settings, *products(site, 400, 3))
        serve.start()
        await wait_for(lambda: _all(db, later, "completed"), "tasks after restart", [proc, serve])

        async def counted() -> bool:  # the agent's counter follows each task's own write
            return (await agent_row(db, agent.id)).tasks_completed_count >= 5

        await wait_for(counted, "the agent's completed count", [proc, serve])
        assert proc.proc.poll() is None  # the same process all along
    finally:
        assert await proc.astop() == 0
    log = proc.log()
    assert "reconnecting in" in log and log.count("connected to ws://") >= 2
    assert (await agent_row(db, agent.id)).tasks_completed_count == 5


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # scale-out: row locks
async def test_many_agents_complete_every_task_exactly_once(
    db: Database, make_settings: SettingsFactory, site: SiteProcess, tmp_path: Path
) -> None:
    """Eight agent processes claim side by side: every task is handed out and done once."""
    # Only a dead agent times out here (one starved by a loaded machine would have its tasks
    # fetched twice, rightly, and hide what is tested).
    settings = process_settings(make_settings, agent_timeout_seconds=60.0)
    agents, total = 8, 240
    created = [await admin.create_agent(db, f"agent-{n}") for n in range(agents)]
    async with app_server(settings) as (url, _):
        serve = InProcessServe(url)
        procs = [
            AgentProcess(serve.url, token, tmp_path / f"agent-{n}.log", concurrency=2)
            for n, (_, token) in enumerate(created)
        ]
        try:
            ids = await _all_connected_then_crawl(db, settings, site, created, procs, serve, total)
        finally:
            for p in procs:
                p.signal(signal.SIGTERM)
            codes = [await p.exited(timeout=60) for p in procs]
    assert codes == [0] * agents
    done = await completions(db)
    assert set(done) == {str(i) for i in ids} and set(done.values()) == {1}
    fetched = Counter(r.path for r in site.requests() if r.path.startswith("/product/"))
    assert len(fetched) == total and set(fetched.values()) == {1}
    async with db.reader() as session:
        per_agent = dict(
            (
                await session.execute(
                    select(Agent.name, Agent.tasks_completed_count).order_by(Agent.id)
                )
            ).all()
        )
    assert sum(per_agent.values()) == total
    assert all(n > 0 for n in per_agent.values()), per_agent  # every agent took part


async def _all_connected_then_crawl(
    db: Database,
    settings: Settings,
    site: SiteProcess,
    created: list[tuple[Agent, str]],
    procs: list[AgentProcess],
    serve: InProcessServe,
    total: int,
) -> list[int]:
    # Every agent connected before there is work: all of them compete for every claim.
    async def all_connected() -> bool:
        return all([await _status(db, agent.id, "connected") for agent, _ in created])

    await wait_for(all_connected, "every agent connected", [*procs, serve], timeout=240)
    # Small pages (2 KB): the point is the hand-out, not parsing 40 KB pages.
    urls = products(site, 1000, total, hosts=len(SITE_HOSTS), query="?kb=2")
    ids = await submit(db, settings, *urls)
    await wait_for(
        lambda: _n(db, CrawlTask.status == "completed", total),
        f"{total} completed tasks",
        [*procs[:2], serve],
        timeout=240,
    )
    return ids


async def _post(url: str, key: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url, headers={"Authorization": f"Bearer {key}"})


async def _all(db: Database, ids: list[int], status: str) -> bool:
    tasks = await tasks_by_id(db, ids)
    return all(t.status == status for t in tasks.values())


async def _n(db: Database, where: object, n: int) -> bool:
    return await count(db, where) >= n


async def _status(db: Database, agent_id: int, status: str) -> bool:
    return (await agent_row(db, agent_id)).status == status
