"""The statements a reviewer must trust: the atomic claim (§6.4), the proxy draw and release
(§6.1–6.3), one lease for crawling and missions, and the leader lease — on both engines."""

from __future__ import annotations

import asyncio
from datetime import date, timedelta

import pytest
from sqlalchemy import func, select, update

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import Domain, Event, Mission, Proxy, WorkerService
from forager.db.types import utcnow
from forager.missions import admin, control, moves, proxy_lease, workers
from forager.missions.codes import decide
from forager.proxies.selection import DomainPolicy, NoProxyAvailable, choose_proxy


async def _services(db: Database, count: int) -> list[WorkerService]:
    async with db.session() as session:
        rows = [
            WorkerService(
                name=f"w{n}", url=f"http://127.0.0.1:{9000 + n}", api_key="x", status="ready"
            )
            for n in range(count)
        ]
        session.add_all(rows)
    return rows


async def _proxies(db: Database, count: int) -> list[int]:
    async with db.session() as session:
        rows = [
            Proxy(name=f"p{n}", proxy_url="127.0.0.1", proxy_port=1000 + n) for n in range(count)
        ]
        session.add_all(rows)
        await session.flush()
        return [p.id for p in rows]


async def _queued(db: Database, count: int) -> list[int]:
    spec = admin.MissionSpec(date(2026, 1, 1), date(2026, 1, count), "all", ("pt",), True)
    return [m.id for m in await admin.create(db, spec, queue=True, by="t", max_span_days=60)]


async def test_concurrent_claims_give_each_mission_to_exactly_one_service(
    db: Database, settings: Settings
) -> None:
    ids = await _queued(db, 30)
    services = await _services(db, 6)
    claimed: list[tuple[int, int]] = []

    async def claimer(service: WorkerService) -> None:
        own = Database(settings.resolved_database_url)  # its own connections, as a process
        try:
            while True:
                async with own.session() as session:
                    m = await moves.claim(session, service, "p")
                if m is None:
                    return
                claimed.append((m.id, service.id))
                async with own.session() as session:
                    assert await workers.release(session, service.id, m.id)
        finally:
            await own.dispose()

    await asyncio.gather(*(claimer(s) for s in services))
    assert sorted(m for m, _ in claimed) == ids  # all of them, none twice
    async with db.reader() as session:
        assigned = await session.scalar(
            select(func.count()).select_from(Event).where(Event.event == "mission_assigned")
        )
        rows = list(await session.scalars(select(Mission)))
    assert assigned == 30
    assert {(m.status, m.checkpoint) for m in rows} == {("running", "extracao")}
    assert {m.id: m.worker_id for m in rows} == dict(claimed)


async def test_claims_take_the_oldest_queued_first(db: Database) -> None:
    [first, second, third] = await _queued(db, 3)
    async with db.session() as session:  # the third was queued before the others
        await session.execute(
            update(Mission)
            .where(Mission.id == third)
            .values(queued_at=utcnow() - timedelta(hours=1))
        )
    [service] = await _services(db, 1)
    order = []
    for _ in range(3):
        async with db.session() as session:
            m = await moves.claim(session, service, None)
            assert m is not None
            order.append(m.id)
            await workers.release(session, service.id, m.id)
    assert order == [third, first, second]


async def test_the_draw_is_random_free_and_never_the_previous_proxy(
    db: Database, settings: Settings
) -> None:
    box = SecretBox(settings)
    ids = await _proxies(db, 3)
    [a, b] = await _services(db, 2)
    drawn = set()
    for _ in range(40):
        async with db.session() as session:
            got = await proxy_lease.lease(
                session, a.id, avoid=ids[0], settings=settings, box=box, now=utcnow()
            )
            assert got is not None and got.id != ids[0]
            drawn.add(got.id)
            await proxy_lease.release(session, a.id)
    assert drawn == set(ids[1:])  # random among the others
    async with db.session() as session:
        held = await proxy_lease.lease(
            session, a.id, avoid=None, settings=settings, box=box, now=utcnow()
        )
    assert held is not None
    async with db.reader() as session:
        proxy = await session.get(Proxy, held.id)
    assert proxy is not None and proxy.in_use_by_worker_id == a.id and proxy.last_used_at
    # b never gets a's proxy while a holds it; with the last one disabled, none is left.
    async with db.session() as session:
        await session.execute(
            update(Proxy)
            .where(Proxy.id.not_in([held.id]), Proxy.id != ids[0])
            .values(is_active=False)
        )
        got = await proxy_lease.lease(
            session, b.id, avoid=ids[0], settings=settings, box=box, now=utcnow()
        )
    assert got is None  # ERROR501 for b


async def test_one_lease_for_crawling_and_missions(db: Database, settings: Settings) -> None:
    box = SecretBox(settings)
    [only] = await _proxies(db, 1)
    [service] = await _services(db, 1)
    async with db.session() as session:
        domain = Domain(
            domain_name="shop.test",
            base_url="http://shop.test",
            parser_name="generic",
            user_agent="t",
            proxy_strategy="exclusive",
            use_global_pool=True,
        )
        session.add(domain)
        await session.flush()
        policy = DomainPolicy.of(domain)
    async with db.session() as session:
        assert await proxy_lease.lease(
            session, service.id, avoid=None, settings=settings, box=box, now=utcnow()
        )
    # Held by a worker service: crawl selection does not see it.
    async with db.session() as session:
        with pytest.raises(NoProxyAvailable):
            await choose_proxy(session, policy, settings, box, owner="crawler")
        await proxy_lease.release(session, service.id)
    # Leased by a crawl: the mission draw does not see it.
    async with db.session() as session:
        choice = await choose_proxy(session, policy, settings, box, owner="crawler")
        assert choice is not None and choice.proxy_id == only
    async with db.session() as session:
        assert (
            await proxy_lease.lease(
                session, service.id, avoid=None, settings=settings, box=box, now=utcnow()
            )
            is None
        )


async def test_three_session_failures_disable_a_proxy_until_its_retest(
    db: Database, settings: Settings
) -> None:
    [proxy_id] = await _proxies(db, 1)
    for _ in range(settings.mission_proxy_failure_limit):
        async with db.session() as session:
            await proxy_lease.session_outcome(session, proxy_id, ok=False, settings=settings)
    async with db.reader() as session:
        proxy = await session.get(Proxy, proxy_id)
    assert proxy is not None
    assert (proxy.failure_count, proxy.is_active, proxy.retest_at is not None) == (3, False, True)


async def test_the_leader_lease_has_one_holder_until_it_expires(
    db: Database, settings: Settings
) -> None:
    # Held for seconds while b is refused (a loaded machine's slow commit must not let it
    # lapse in between), then renewed for a moment, after which b takes over.
    assert await control.acquire(db, "a", 5)
    assert not await control.acquire(db, "b", 5)
    assert await control.acquire(db, "a", 0.3)  # renewal

    async def b_takes_over() -> bool:
        return await control.acquire(db, "b", 5)

    async with asyncio.timeout(10):
        while not await b_takes_over():
            await asyncio.sleep(0.05)
    assert not await control.acquire(db, "a", 5)  # a lost it
    view = await control.read(db)
    assert view.leader_id == "b" and view.leading(utcnow())
    gen = (await control.request_run(db, "t")).run_generation
    await control.request_run(db, "t")  # a second Iniciar during the run
    assert not await control.finish_run(db, "b", gen)  # …so this run does not switch it off
    assert (await control.read(db)).run_requested


def test_the_retry_policy_of_the_seed() -> None:
    assert decide("ERROR101", retry_count=0, max_retries=2).retry
    assert decide("ERROR101", retry_count=2, max_retries=2).final_code == "ERROR104"
    assert decide("ERROR202", retry_count=2, max_retries=2).final_code == "ERROR203"
    assert decide("ERROR303", retry_count=0, max_retries=2).retry
    assert not decide("ERROR300", retry_count=0, max_retries=2, writer_retries=1).retry
    assert decide("ERROR300", retry_count=0, max_retries=2, writer_retries=1).final_code == (
        "ERROR304"
    )
    for at_once in ("ERROR400", "ERROR401", "ERROR500", "ERROR502", "ERROR104"):
        verdict = decide(at_once, retry_count=0, max_retries=5)
        assert (verdict.retry, verdict.final_code) == (False, at_once)
