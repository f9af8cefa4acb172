"""Issue 33: sticky sessions. A domain's fetches go through sessions (a sealed cookie jar bound to
one proxy), each leased to one fetch at a time, reused for N fetches, warmed up first, retired
after N uses or on a block and replaced; any process continues another's; no cookie value is
ever shown or logged."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.agents import admin as agents_admin
from forager.agents.client import AgentClient
from forager.api.deps import Runtime
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlTask, DomainProxy, DomainSession, Event, Proxy
from forager.db.types import utcnow
from forager.domains import admin
from forager.domains.sticky_sessions import StickySessions
from forager.errors import FetchError, FetchTimeout, HTTPStatusError
from forager.fetch.base import FetchRequest
from forager.fetch.browser import BrowserFetcher
from forager.fetch.fetcher_set import build_fetcher
from forager.proxies.selection import DomainPolicy, ProxyChoice, choose_proxy
from tests.conftest import SettingsFactory
from tests.support import sticky
from tests.support.agents import app_server
from tests.support.crawling import crawl, run_pool_until, submit, tasks_by_id
from tests.support.fetching import fetch_settings, require
from tests.support.site import TestSite
from tests.support.waiting import eventually
from tests.support.workers import all_up, logs, start_worker, stop_worker


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def _tasks(api: httpx.AsyncClient, *urls: str, **options: Any) -> list[int]:
    ids = []
    for url in urls:
        response = await api.post("/api/tasks", json={"url": url, **options})
        assert response.status_code == 201, response.text
        ids.append(response.json()["task"]["id"])
    return ids


async def _events(api: httpx.AsyncClient, domain_id: int) -> list[dict[str, Any]]:
    response = await api.get(
        "/api/events", params={"entity_type": "domain", "entity_id": str(domain_id), "limit": 200}
    )
    assert response.status_code == 200, response.text
    return [e for e in response.json()["items"] if e["event"].startswith("session_")]


async def test_sessions_keep_cookies_retire_after_n_uses_and_on_a_block(
    api: httpx.AsyncClient,
    make_settings: SettingsFactory,
    site: TestSite,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    sticky.LOG.reset()
    host = "127.0.0.3"
    policy = {"max_uses": 3, "warmup_url": site.url("/sticky/warm", host=host)}
    created = await api.post(
        "/api/domains",
        json={
            "domain_name": host,
            "base_url": site.url("/", host=host).rstrip("/"),
            "crawl_delay_seconds": 0,
            "sticky_sessions": policy,
        },
    )
    assert created.status_code == 201, created.text
    domain = created.json()
    assert domain["sticky_sessions"] == {**policy, "max_age_minutes": 50.0}
    for bad, field in (
        ({"max_uses": 0}, "sticky_sessions.max_uses"),
        ({"max_age_minutes": -1}, "sticky_sessions.max_age_minutes"),
        ({"warmup_url": "ftp://x/"}, "sticky_sessions.warmup_url"),
        ({"pool": 3}, "sticky_sessions.pool"),
    ):
        refused = await api.patch(f"/api/domains/{domain['id']}", json={"sticky_sessions": bad})
        assert refused.status_code == 422, refused.text
        assert field in [e["field"] for e in refused.json()["errors"]], refused.text
    runtime = _runtime(api)
    settings = make_settings()

    # Seven pages, one at a time: sessions of three fetches each (3 + 3 + 1), each warmed up.
    ids = await _tasks(api, *(site.url(f"/sticky/p/{n}", host=host) for n in range(1, 8)))
    tasks = await crawl(runtime.db, settings, ids, concurrency=1)
    assert {t.status for t in tasks.values()} == {"completed"}
    sessions = sticky.LOG.by_session()
    assert sticky.LOG.warmups == 3 and len(sessions) == 3
    for sid, visits in sessions.items():
        assert sid.startswith("w")  # the warm-up's cookie, kept and sent
        assert all(v.warmed for v in visits)
        # Each answer's cookie went back with the session's next fetch: 0, 1, 2 earlier visits.
        assert [v.hits for v in visits] == list(range(len(visits)))
    assert sorted(len(v) for v in sessions.values()) == [1, 3, 3]
    assert sticky.LOG.overlaps == 0

    listed = (await api.get(f"/api/domains/{domain['id']}/sessions")).json()
    assert listed["total"] == 3
    by_state = Counter((s["state"], s["uses"], s["retired_reason"]) for s in listed["items"])
    assert by_state == {("retired", 3, "max_uses"): 2, ("active", 1, None): 1}
    [active] = [s for s in listed["items"] if s["state"] == "active"]
    assert active["has_cookies"] and active["proxy_id"] is None and not active["leased"]

    # A robot check through the active session retires it; the next page gets a new one.
    [blocked] = await _tasks(api, site.url("/sticky/p/8?block=1", host=host), max_retries=0)
    tasks = await crawl(runtime.db, settings, [blocked], concurrency=1)
    assert tasks[blocked].status == "failed"
    block = tasks[blocked].error_type
    assert block in ("captcha", "blocked")
    [after] = await _tasks(api, site.url("/sticky/p/9", host=host))
    tasks = await crawl(runtime.db, settings, [after], concurrency=1)
    assert tasks[after].status == "completed"
    visits = sticky.LOG.visits
    assert visits[-2].sid == active_sid(sessions, 1)  # the block came through the active one
    assert visits[-1].sid not in sessions and visits[-1].hits == 0  # then a new session
    shown = await api.get(f"/api/domains/{domain['id']}/sessions", params={"state": "retired"})
    reasons = Counter(s["retired_reason"] for s in shown.json()["items"])
    assert reasons == {"max_uses": 2, block: 1}

    events = await _events(api, domain["id"])
    assert Counter(e["event"] for e in events) == {"session_created": 4, "session_retired": 3}
    assert {e["details"]["reason"] for e in events if e["event"] == "session_retired"} == {
        "max_uses",
        block,
    }

    # Retire them all (audited); then nothing is active.
    retired = await api.post(f"/api/domains/{domain['id']}/sessions/retire")
    assert retired.json() == {"retired": 1}
    again = await api.post(f"/api/domains/{domain['id']}/sessions/{active['id']}/retire")
    assert again.status_code == 409
    events = await _events(api, domain["id"])
    operator = [e for e in events if e["details"].get("reason") == "operator"]
    assert len(operator) == 1 and operator[0]["actor"] == "test-admin"
    off = await api.patch(
        f"/api/domains/{domain['id']}", json={"sticky_sessions": {"enabled": False}}
    )
    assert off.status_code == 200 and off.json()["sticky_sessions"] is None

    # The cookies were stored sealed (and erased with the session), never shown or logged.
    async with runtime.db.reader() as session:
        rows = list(await session.scalars(select(DomainSession)))
    assert len(rows) == 4 and all(r.cookies_sealed is None for r in rows)
    answers = [
        json.dumps(listed),
        shown.text,
        json.dumps(events),
        (await api.get(f"/api/domains/{domain['id']}")).text,
    ]
    for text in [*answers, caplog.text]:
        assert sticky.MARK not in text


def active_sid(sessions: dict[str, list[sticky.Visit]], uses: int) -> str:
    [sid] = [sid for sid, visits in sessions.items() if len(visits) == uses]
    return sid


# PostgreSQL: row locks let two processes' compare-and-sets really race (SQLite's one writer
# lock serializes them; the same statements run on it in the lease test above).
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
@pytest.mark.slow
async def test_two_processes_share_sessions_never_at_once(
    db: Database,
    make_settings: SettingsFactory,
    site: TestSite,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A `forager worker` process and this test's own worker pool on one domain's sessions:
    each session's visits count up without a gap (a process continues the cookies the other
    stored), sessions pass between the processes, and no session is in two requests at once.

    In turns, then together: this process alone makes the sessions; the other alone then takes
    them (the least recently used free session before a new one), so a session passes between
    the processes every run; then both at once on the same sessions. Left to chance (both at
    once from the start) each process could keep re-taking the session it had just given back,
    and none passed (a loaded CI machine: ``assert any(...)`` failed)."""
    caplog.set_level(logging.INFO)
    sticky.LOG.reset()
    host = "127.0.0.4"
    settings = make_settings(lease_seconds=120.0, fetch_timeout_seconds=30.0)
    values = {
        "base_url": site.url("/", host=host).rstrip("/"),
        "crawl_delay_seconds": 0,
        # More than either process's two slots, fewer than their four: each always has work
        # (one alone cannot hold the domain, as it did when it re-claimed every slot it freed
        # before the other polled), and when a fetch ends either may claim the next task and
        # take the session just given back.
        "max_concurrent_requests": 3,
        "ignore_robots": True,
        "sticky_sessions": {"max_uses": 1000, "warmup_url": site.url("/sticky/warm", host=host)},
    }
    await admin.create(db, settings, host, values, SecretBox(settings))
    pages = {n: site.url(f"/sticky/p/{n}?ms=60", host=host) for n in range(1, 25)}
    ids: list[int] = []

    async def crawled(numbers: range) -> list[int]:
        turn = await submit(db, settings, *(pages[n] for n in numbers))
        ids.extend(turn)
        return turn

    # This process alone: it makes the domain's sessions and stores their cookies.
    mine = await crawled(range(1, 7))
    await run_pool_until(db, settings, lambda: _done(db, mine), concurrency=2, timeout=180)
    other = start_worker(settings, tmp_path, "other", 2, extra_env=_INFO)
    try:
        await all_up(db, [other], context=lambda: logs(tmp_path))
        # The other alone: every session is free, so it takes them on.
        theirs = await crawled(range(7, 13))
        await eventually(
            lambda: _done(db, theirs), "the other process's pages", timeout=180,
            context=lambda: logs(tmp_path),
        )  # fmt: skip
        # Both at once, on the same sessions.
        both = await crawled(range(13, 25))
        await run_pool_until(db, settings, lambda: _done(db, both), concurrency=2, timeout=180)
    finally:
        code = stop_worker(other)
    assert code == 0, logs(tmp_path)
    assert sticky.LOG.overlaps == 0
    sessions = sticky.LOG.by_session()
    assert 1 <= len(sessions) <= 3  # at most one per fetch in flight
    for visits in sessions.values():
        assert [v.hits for v in visits] == list(range(len(visits)))
    async with db.reader() as session:
        fetched_by = dict(
            (
                await session.execute(
                    select(CrawlTask.url, CrawlAttempt.worker_id)
                    .join(CrawlAttempt, CrawlAttempt.task_id == CrawlTask.id)
                    .where(CrawlAttempt.phase == "fetch", CrawlTask.id.in_(ids))
                )
            ).all()
        )
    by_url = {url: n for n, url in pages.items()}
    workers_of = {  # the processes (host:pid:kind:…) that fetched through each session
        sid: {
            fetched_by[url].split(":")[1] for url, n in by_url.items() if n in {v.n for v in visits}
        }
        for sid, visits in sessions.items()
    }
    assert len(set().union(*workers_of.values())) == 2  # both processes fetched
    assert any(len(w) == 2 for w in workers_of.values())  # a session went from one to the other
    assert sticky.MARK not in logs(tmp_path) and sticky.MARK not in caplog.text


_INFO = {"FORAGER_LOG_LEVEL": "INFO"}


async def _done(db: Database, ids: list[int]) -> bool | None:
    tasks = await tasks_by_id(db, ids)
    return all(t.status == "completed" for t in tasks.values()) or None


async def test_an_agent_fetches_through_the_session_and_its_cookies_come_back(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    """The real agent program: the control plane sends the session's cookies (and, for a new
    session, the warm-up URL) with each task and keeps the cookies the agent brings back."""
    sticky.LOG.reset()
    host = "127.0.0.5"
    settings = make_settings(serve_workers=0, agent_heartbeat_seconds=0.5)
    async with app_server(settings) as (url, app):
        db = app.state.runtime.db
        _, token = await agents_admin.create_agent(db, "home-1")
        values = {
            "base_url": site.url("/", host=host).rstrip("/"),
            "crawl_delay_seconds": 0,
            "sticky_sessions": {"max_uses": 2, "warmup_url": site.url("/sticky/warm", host=host)},
        }
        await admin.create(db, settings, host, values, SecretBox(settings))
        ids = await submit(
            db, settings, *(site.url(f"/sticky/p/{n}", host=host) for n in (1, 2, 3))
        )
        client = AgentClient(url, token, concurrency=1, backoff_max=1.0)
        runner = asyncio.create_task(client.run())
        try:
            await eventually(lambda: _done(db, ids), "the agent's tasks")
        finally:
            client.stop()
            async with asyncio.timeout(20):
                assert await runner == 0
        async with db.reader() as session:
            rows = list(await session.scalars(select(DomainSession).order_by(DomainSession.id)))
    sessions = sticky.LOG.by_session()
    assert sticky.LOG.warmups == 2 and sorted(len(v) for v in sessions.values()) == [1, 2]
    for sid, visits in sessions.items():
        assert sid.startswith("w") and [v.hits for v in visits] == list(range(len(visits)))
    assert [(r.state, r.uses, r.retired_reason) for r in rows] == [
        ("retired", 2, "max_uses"),
        ("active", 1, None),
    ]
    assert rows[1].cookies_sealed is not None and sticky.MARK not in rows[1].cookies_sealed


# -- the pool's moves, in process -------------------------------------------------------------


class _Task:
    def __init__(self, task_id: int, domain_id: int, policy: dict[str, Any]) -> None:
        self.id, self.domain_id, self.sticky_sessions = task_id, domain_id, policy


async def test_a_session_is_leased_to_one_fetch_until_given_back_or_its_lease_runs_out(
    db: Database, make_settings: SettingsFactory
) -> None:
    settings = make_settings()
    box = SecretBox(settings)
    domain = await admin.create(db, settings, "pool.example", {}, box)
    pool = StickySessions(db, settings, box)
    policy = {"max_uses": 10}
    first = await pool.take(_Task(1, domain.id, policy), "w1:1")
    second = await pool.take(_Task(2, domain.id, policy), "w2:2")
    assert first and second and first.new and second.new
    assert first.session_id != second.session_id  # held: the other fetch made its own
    assert await pool.give_back(first, {"sid": f"a-{sticky.MARK}"}) is None
    third = await pool.take(_Task(3, domain.id, policy), "w2:3")
    assert third and third.session_id == first.session_id and not third.new
    assert third.cookies == {"sid": f"a-{sticky.MARK}"} and third.uses == 2
    # A holder that never comes back: its lease runs out and the session is free again.
    async with db.session() as session:
        await session.execute(
            update(DomainSession)
            .where(DomainSession.id == second.session_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    taken = await pool.take(_Task(4, domain.id, policy), "w3:4")
    assert taken and taken.session_id == second.session_id
    assert await pool.give_back(second, {"late": "1"}) is None  # too late: nothing kept
    # Faults raise the error score: three (less the answers) retire the session.
    assert await pool.give_back(taken, None, FetchError("reset", error_type="network")) is None
    reasons = []
    for n in range(2):
        again = await pool.take(_Task(10 + n, domain.id, policy), f"w3:{10 + n}")
        assert again and again.session_id == second.session_id
        reasons.append(await pool.give_back(again, None, FetchTimeout("slow")))
    assert reasons == [None, "errors"]
    async with db.reader() as session:
        row = await session.get(DomainSession, second.session_id)
    assert row is not None and row.state == "retired" and row.cookies_sealed is None
    # A 404 is no fault; a ban retires at once; the stored jar is sealed.
    assert await pool.give_back(third, {"n": "1"}, HTTPStatusError("gone", status_code=404)) is None
    again = await pool.take(_Task(20, domain.id, policy), "w1:20")
    assert again and again.session_id == first.session_id
    blocked = FetchError("robot check", error_type="captcha")
    assert await pool.give_back(again, None, blocked) == "captcha"
    async with db.reader() as session:
        rows = list(await session.scalars(select(DomainSession)))
    assert {r.state for r in rows} == {"retired"}
    assert all(r.cookies_sealed is None or sticky.MARK not in r.cookies_sealed for r in rows)


@pytest.mark.parametrize("kind", ["http", "impersonate", "browser"])
async def test_every_fetcher_returns_the_cookies_the_site_set(
    kind: str, site: TestSite, tmp_path: Path
) -> None:
    require(kind)
    fetcher = build_fetcher(kind, fetch_settings(tmp_path))
    try:
        warm = await fetcher.fetch(FetchRequest(site.url("/sticky/warm"), "ua", jar="session-1"))
        cookies = {"sid": warm.cookies["sid"], "hits": "4"}
        page = await fetcher.fetch(
            FetchRequest(site.url("/sticky/p/3"), "ua", cookies=cookies, jar="session-1")
        )
        if isinstance(fetcher, BrowserFetcher):  # the jar's older context went with its cookies
            assert (fetcher.contexts_created, fetcher.contexts_closed) == (2, 1)
    finally:
        await fetcher.aclose()
    assert warm.cookies["sid"].startswith("w") and warm.cookies["warmed"] == "1"
    assert page.cookies["hits"] == "5"  # a cookie with an Expires date (a comma inside)
    [visit] = sticky.LOG.visits[-1:]
    assert (visit.sid, visit.hits) == (cookies["sid"], 4)


async def test_a_session_keeps_its_proxy_and_is_retired_when_the_proxy_is_disabled(
    db: Database, make_settings: SettingsFactory
) -> None:
    settings = make_settings()
    box = SecretBox(settings)
    domain = await admin.create(db, settings, "proxied.example", {"proxy_strategy": "lru"}, box)
    async with db.session() as session:
        proxies = [Proxy(proxy_url="127.0.0.9", proxy_port=port) for port in (11, 12, 13)]
        session.add_all(proxies)
        await session.flush()
        session.add_all(DomainProxy(domain_id=domain.id, proxy_id=p.id) for p in proxies)
    pool = StickySessions(db, settings, box)

    async def choose(session: AsyncSession, policy: DomainPolicy) -> ProxyChoice | None:
        return await choose_proxy(session, policy, settings, box, owner="w")

    task = _Task(1, domain.id, {"max_uses": 100})
    first = await pool.take(task, "w:1", choose)
    assert first is not None and first.proxy is not None
    bound = first.proxy.proxy_id
    await pool.give_back(first, {"a": "1"})
    for n in range(2, 5):  # LRU would rotate the proxies: the session keeps its own
        again = await pool.take(task, f"w:{n}", choose)
        assert again and again.session_id == first.session_id and again.proxy
        assert again.proxy.proxy_id == bound
        await pool.give_back(again, {})
    async with db.session() as session:
        await session.execute(update(Proxy).where(Proxy.id == bound).values(is_active=False))
    other = await pool.take(task, "w:9", choose)
    assert other and other.new and other.proxy and other.proxy.proxy_id != bound
    async with db.reader() as session:
        old = await session.get(DomainSession, first.session_id)
    assert old is not None and (old.state, old.retired_reason) == ("retired", "proxy_unusable")
    # A direct fetch (an agent's) never takes a proxied session, nor the other way round.
    direct = await pool.take(task, "agent:1")
    assert direct and direct.new and direct.proxy is None


async def test_a_session_past_its_age_is_retired_and_replaced(
    db: Database, make_settings: SettingsFactory
) -> None:
    settings = make_settings()
    box = SecretBox(settings)
    domain = await admin.create(db, settings, "aged.example", {}, box)
    pool = StickySessions(db, settings, box)
    task = _Task(1, domain.id, {"max_uses": 100, "max_age_minutes": 5})
    first = await pool.take(task, "w:1")
    assert first is not None
    await pool.give_back(first, {"a": "1"})
    async with db.session() as session:
        await session.execute(
            update(DomainSession)
            .where(DomainSession.id == first.session_id)
            .values(created_at=utcnow() - timedelta(minutes=6))
        )
    second = await pool.take(task, "w:2")
    assert second and second.new and second.session_id != first.session_id
    assert second.cookies == {}
    async with db.reader() as session:
        old = await session.get(DomainSession, first.session_id)
        events = list(await session.scalars(select(Event).where(Event.event == "session_retired")))
    assert old is not None and (old.state, old.retired_reason) == ("retired", "max_age")
    assert [e.details for e in events] == [
        {"session_id": first.session_id, "reason": "max_age", "uses": 1}
    ]
