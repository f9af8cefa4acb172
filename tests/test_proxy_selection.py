"""Proxy selection strategies, leases, health thresholds and breakers, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text, update

from forager.config import Settings
from forager.db import breakers
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, Domain, DomainProxy, Proxy
from forager.db.types import utcnow
from forager.errors import EgressDenied, FetchError
from forager.proxies.health import (
    record_mapping_health,
    record_proxy_health,
    record_verdict,
    verdict,
)
from forager.proxies.selection import (
    DomainPolicy,
    NoProxyAvailable,
    ProxyChoice,
    _take,
    choose_proxy,
    release_proxy,
)
from forager.runtime import open_database
from forager.worker.policy import FetchPolicy
from tests.support.crawling import submit, tasks_by_id
from tests.support.waiting import eventually


async def _domain(db: Database, name: str = "shop.test", **values: Any) -> int:
    async with db.session() as session:
        domain = Domain(
            domain_name=name,
            base_url=f"http://{name}",
            parser_name="generic",
            user_agent="test",
            **values,
        )
        session.add(domain)
        await session.flush()
        return domain.id


async def _proxies(
    db: Database, count: int, *, map_to: int | None = None, **values: Any
) -> list[int]:
    async with db.session() as session:
        rows = [Proxy(proxy_url=f"10.0.0.{n}", proxy_port=8000 + n, **values) for n in range(count)]
        session.add_all(rows)
        await session.flush()
        if map_to is not None:
            session.add_all(DomainProxy(domain_id=map_to, proxy_id=p.id) for p in rows)
        return [p.id for p in rows]


async def _choose(
    db: Database,
    settings: Settings,
    policy: DomainPolicy,
    owner: str = "w:1",
    avoid: frozenset[int] = frozenset(),
) -> ProxyChoice | None:
    async with db.session() as session:
        return await choose_proxy(session, policy, settings, None, owner=owner, avoid=avoid)


async def _picks(db: Database, settings: Settings, policy: DomainPolicy, n: int) -> set[int]:
    picked = set()
    for _ in range(n):
        choice = await _choose(db, settings, policy)
        assert choice is not None
        picked.add(choice.proxy_id)
    return picked


async def _release(db: Database, choice: ProxyChoice) -> bool:
    assert choice.lease_owner is not None
    async with db.session() as session:
        return await release_proxy(session, choice.proxy_id, choice.lease_owner)


async def _get(db: Database, model: Any, row_id: int) -> Any:
    async with db.reader() as session:
        return await session.scalar(select(model).where(model.id == row_id))


async def test_lru_rotates_through_mapped_proxies(db: Database, settings: Settings) -> None:
    domain_id = await _domain(db)
    ids = await _proxies(db, 3, map_to=domain_id)
    await _proxies(db, 2)  # in the pool, not mapped: never used by this domain
    policy = DomainPolicy(domain_id)
    picks = [(await _choose(db, settings, policy)) for _ in range(6)]
    used = [p.proxy_id for p in picks if p is not None]
    assert used == ids + ids  # least recently used first, every time


async def test_random_picks_only_usable_proxies(db: Database, settings: Settings) -> None:
    domain_id = await _domain(db, proxy_strategy="random")
    a, b, off, dead = await _proxies(db, 4, map_to=domain_id)
    async with db.session() as session:
        await session.execute(
            update(DomainProxy).where(DomainProxy.proxy_id == off).values(is_active=False)
        )
        await session.execute(update(Proxy).where(Proxy.id == dead).values(is_active=False))
    policy = DomainPolicy(domain_id, "random")
    seen = Counter()
    for _ in range(40):
        choice = await _choose(db, settings, policy)
        assert choice is not None
        seen[choice.proxy_id] += 1
    assert set(seen) == {a, b}


async def test_exclusive_leases_one_holder_and_rotates_sessions(
    db: Database, settings: Settings
) -> None:
    domain_id = await _domain(db, proxy_strategy="exclusive")
    first_id, second_id = await _proxies(db, 2, map_to=domain_id)
    policy = DomainPolicy(domain_id, "exclusive")
    one = await _choose(db, settings, policy, owner="w:1")
    two = await _choose(db, settings, policy, owner="w:2")
    assert one is not None and two is not None
    assert {one.proxy_id, two.proxy_id} == {first_id, second_id}
    assert (one.lease_owner, two.lease_owner) == ("w:1", "w:2")
    with pytest.raises(NoProxyAvailable) as busy:
        await _choose(db, settings, policy, owner="w:3")
    assert busy.value.retry_in is not None  # busy, not impossible: wait, don't fail
    stored = await _get(db, Proxy, one.proxy_id)
    assert stored.lease_owner == "w:1" and stored.lease_expires_at > utcnow()

    assert await _release(db, one)
    assert not await _release(db, one)  # only the holder releases, once
    three = await _choose(db, settings, policy, owner="w:3")
    assert three is not None and three.proxy_id == one.proxy_id  # the only free one
    # A new session gets a different proxy than the last one when another is free.
    assert await _release(db, two)
    assert await _release(db, three)
    four = await _choose(db, settings, policy, owner="w:4")
    assert four is not None and four.proxy_id == two.proxy_id  # released longest ago
    assert await _release(db, four)
    five = await _choose(db, settings, policy, owner="w:5")
    assert five is not None and five.proxy_id != four.proxy_id

    # An expired lease (its holder died) is free again.
    async with db.session() as session:
        await session.execute(
            update(Proxy).values(lease_owner="dead", lease_expires_at=utcnow() - timedelta(1))
        )
    assert await _choose(db, settings, policy, owner="w:6") is not None


async def test_global_pool_direct_and_country(db: Database, settings: Settings) -> None:
    domain_id = await _domain(db)
    us, de = await _proxies(db, 2)
    async with db.session() as session:
        await session.execute(update(Proxy).where(Proxy.id == us).values(country_code="US"))
        await session.execute(update(Proxy).where(Proxy.id == de).values(country_code="DE"))
    # No mapping and no pool: direct.
    assert await _choose(db, settings, DomainPolicy(domain_id)) is None
    # The pool: every active proxy, each getting this domain's own counters row.
    pool = DomainPolicy(domain_id, use_global_pool=True)
    assert await _picks(db, settings, pool, 2) == {us, de}
    async with db.reader() as session:
        sources = set(await session.scalars(select(DomainProxy.source)))
    assert sources == {"pool"}
    # A required country: only proxies there; none there is a plain refusal.
    germany = DomainPolicy(domain_id, use_global_pool=True, required_country_code="de")
    assert await _picks(db, settings, germany, 3) == {de}
    with pytest.raises(NoProxyAvailable) as none:
        await _choose(db, settings, DomainPolicy(domain_id, required_country_code="FR"))
    assert none.value.retry_in is None and "FR" in none.value.message
    # Once an operator maps a proxy, only mapped proxies are used, pool or not.
    other = await _domain(db, "other.test")
    async with db.session() as session:
        session.add(DomainProxy(domain_id=other, proxy_id=us))
    mapped = DomainPolicy(other, use_global_pool=True)
    assert await _picks(db, settings, mapped, 3) == {us}


async def test_rate_limit_per_domain_and_proxy(db: Database, settings: Settings) -> None:
    slow = await _domain(db, proxy_rate_limit_rps=0.5)
    other = await _domain(db, "other.test", proxy_rate_limit_rps=0.5)
    [proxy_id] = await _proxies(db, 1)
    async with db.session() as session:
        session.add_all(
            [
                DomainProxy(domain_id=slow, proxy_id=proxy_id),
                DomainProxy(domain_id=other, proxy_id=proxy_id),
            ]
        )
    policy = DomainPolicy(slow, rate_limit_rps=0.5)
    assert await _choose(db, settings, policy) is not None
    with pytest.raises(NoProxyAvailable) as limited:
        await _choose(db, settings, policy)
    assert limited.value.retry_in is not None and 0 < limited.value.retry_in <= 2.0
    # The same proxy for another domain has its own budget.
    assert await _choose(db, settings, DomainPolicy(other, rate_limit_rps=0.5)) is not None
    # Once the pair's time has come it is usable again.
    async with db.session() as session:
        await session.execute(
            update(DomainProxy)
            .where(DomainProxy.domain_id == slow)
            .values(next_request_at=utcnow() - timedelta(seconds=1))
        )
    assert await _choose(db, settings, policy) is not None


async def test_a_pick_read_before_another_committed_does_not_break_the_pair_rate(
    db: Database, settings: Settings
) -> None:
    # On PostgreSQL two workers' picks can overlap so: one reads the pair (free), the other
    # commits its pick (the pair now waits an hour), the first locks the proxy (free again)
    # and takes it. The take reads the pair's time again under its lock and refuses.
    domain_id = await _domain(db, proxy_rate_limit_rps=1 / 3600)
    [proxy_id] = await _proxies(db, 1, map_to=domain_id)
    policy = DomainPolicy(domain_id, rate_limit_rps=1 / 3600)
    async with db.reader() as session:
        proxy, mapping = (
            await session.execute(
                select(Proxy, DomainProxy).join(DomainProxy, DomainProxy.proxy_id == Proxy.id)
            )
        ).one()
    assert mapping.next_request_at is None  # what the first worker read
    assert await _choose(db, settings, policy, owner="w:2") is not None  # the other's pick
    async with db.session() as session:
        taken = await _take(session, policy, settings, proxy, mapping, "w:1", utcnow())
    assert not taken
    assert (await _get(db, Proxy, proxy_id)).hour_requests == 1  # only the other's pick counted
    gate = (await _mapping(db, domain_id, proxy_id)).next_request_at
    assert gate is not None and gate > utcnow() + timedelta(minutes=59)


async def test_ban_avoidance_prefers_another_proxy(db: Database, settings: Settings) -> None:
    domain_id = await _domain(db)
    a, b = await _proxies(db, 2, map_to=domain_id)
    policy = DomainPolicy(domain_id)
    for _ in range(3):
        choice = await _choose(db, settings, policy, avoid=frozenset({a}))
        assert choice is not None and choice.proxy_id == b
    # Avoiding the only usable proxy still uses it rather than nothing.
    async with db.session() as session:
        await session.execute(update(Proxy).where(Proxy.id == b).values(is_active=False))
    choice = await _choose(db, settings, policy, avoid=frozenset({a}))
    assert choice is not None and choice.proxy_id == a


async def test_health_thresholds_and_ewma(db: Database, make_settings: Any) -> None:
    settings: Settings = make_settings()
    domain_id = await _domain(db)
    [proxy_id] = await _proxies(db, 1, map_to=domain_id)

    async def mapping() -> DomainProxy:
        async with db.reader() as session:
            row = await session.scalar(select(DomainProxy).where(DomainProxy.proxy_id == proxy_id))
            assert row is not None
            return row

    async def record(ok: bool, *, mapping_only: bool = False, ms: int | None = None) -> None:
        async with db.session() as session:
            await record_mapping_health(
                session, domain_id, proxy_id, ok=ok, response_ms=ms, settings=settings
            )
            if not mapping_only:
                await record_proxy_health(
                    session, proxy_id, ok=ok, response_ms=ms, settings=settings
                )

    for _ in range(4):
        await record(False, mapping_only=True)
    await record(True, mapping_only=True, ms=100)  # success resets the streak
    assert ((await mapping()).failure_count, (await mapping()).is_active) == (0, True)
    await record(True, mapping_only=True, ms=200)
    assert (await mapping()).avg_response_time_ms == 130  # 100·0.7 + 200·0.3
    for _ in range(4):
        await record(False, mapping_only=True)
    assert (await mapping()).is_active
    await record(False, mapping_only=True)  # the 5th in a row
    assert not (await mapping()).is_active
    assert (await _get(db, Proxy, proxy_id)).is_active  # for this domain only

    for n in range(9):
        async with db.session() as session:
            await record_proxy_health(
                session, proxy_id, ok=False, response_ms=None, settings=settings
            )
        assert (await _get(db, Proxy, proxy_id)).is_active, n
    async with db.session() as session:
        await record_proxy_health(session, proxy_id, ok=False, response_ms=None, settings=settings)
    proxy = await _get(db, Proxy, proxy_id)
    assert not proxy.is_active and proxy.failure_count == 10
    assert proxy.retest_at is not None and proxy.retest_at > utcnow()  # background re-test due


@dataclass(frozen=True)
class _Task:
    """What ``FetchPolicy`` reads of a task."""

    id: int
    domain_id: int
    url: str = "http://shop.test/p"
    user_agent: str = "test"
    ignore_robots: bool = True


async def test_one_verdict_for_every_outcome_through_a_proxy(
    db: Database, settings: Settings
) -> None:
    """The worker's policy judges a fetch through a proxy by ``proxies.health.verdict``: a
    proxy fault counts everywhere, a ban (a CAPTCHA page too) for the domain only, an egress
    refusal not at all (nothing went through the proxy), a site's answer as a success."""
    domain_id = await _domain(db)
    [proxy_id] = await _proxies(db, 1, map_to=domain_id)
    policy = FetchPolicy(db, settings, None, "w")
    choice = ProxyChoice(proxy_id, "http://10.0.0.0:8000")

    async def counts() -> tuple[int, int, int, int]:
        async with db.reader() as session:
            mapping = await session.scalar(
                select(DomainProxy).where(DomainProxy.proxy_id == proxy_id)
            )
        assert mapping is not None
        proxy = await _get(db, Proxy, proxy_id)
        return (
            mapping.success_count,
            mapping.failure_count,
            proxy.success_count,
            proxy.failure_count,
        )

    async def fail(exc: FetchError) -> None:
        async with db.session() as session:
            await policy.failed(session, _Task(1, domain_id), choice, exc)

    await fail(EgressDenied("10.1.2.3 is a private address"))
    assert await counts() == (0, 0, 0, 0)
    await fail(FetchError("a CAPTCHA page", error_type="captcha", status_code=200))
    assert await counts() == (0, 1, 0, 0)
    await fail(FetchError("connection refused", error_type="proxy"))
    assert await counts() == (0, 2, 0, 1)
    await fail(FetchError("404", error_type="http_4xx", status_code=404))
    assert await counts() == (1, 0, 1, 0)
    assert [verdict(t) for t in (None, "egress_denied", "blocked", "timeout", "http_5xx")] == [
        "ok",
        "none",
        "ban",
        "fault",
        "ok",
    ]


async def test_breaker_opens_half_opens_and_closes(db: Database, settings: Settings) -> None:
    [proxy_id] = await _proxies(db, 1)

    async def outcome(ok: bool) -> None:
        async with db.session() as session:
            await record_proxy_health(session, proxy_id, ok=ok, response_ms=5, settings=settings)

    async def state() -> str:
        proxy = await _get(db, Proxy, proxy_id)
        return breakers.effective_state(
            proxy.breaker_state, proxy.breaker_opened_at, settings, utcnow()
        )

    async def allowed() -> bool:
        async with db.reader() as session:
            found = await session.scalar(
                select(Proxy.id).where(
                    Proxy.id == proxy_id, breakers.allows(Proxy, settings, utcnow())
                )
            )
            return found is not None

    async def age_open_breaker() -> None:
        past = utcnow() - timedelta(seconds=settings.breaker_open_seconds + 1)
        async with db.session() as session:
            await session.execute(update(Proxy).values(breaker_opened_at=past))

    for _ in range(4):
        await outcome(False)
    assert await state() == "closed"
    await outcome(False)
    assert (await state(), await allowed()) == ("open", False)
    await age_open_breaker()
    assert (await state(), await allowed()) == ("half_open", True)
    await outcome(False)  # a failure while half-open opens it again, for a full period
    assert (await state(), await allowed()) == ("open", False)
    await age_open_breaker()
    for _ in range(4):
        await outcome(True)
    assert await state() == "half_open"
    await outcome(True)
    assert await state() == "closed"
    proxy = await _get(db, Proxy, proxy_id)
    assert (proxy.breaker_failures, proxy.breaker_successes) == (0, 0)


# -- two processes never hold the same exclusive proxy --------------------------------------


def _lease_loop(database_url: str, domain_id: int, locks: str, rounds: int, name: str) -> None:
    import asyncio

    from forager.config import load_settings

    async def main() -> tuple[int, int]:
        settings = load_settings(database_url=database_url, data_dir=Path(locks))
        db = await open_database(settings)
        held = busy = 0
        policy = DomainPolicy(domain_id, "exclusive")
        # Each process holds a proxy ``rounds`` times (a process that starts late, on a loaded
        # machine, must not lose every try to the others): busy tries wait a moment and retry.
        deadline = time.monotonic() + 300
        try:
            while held < rounds and time.monotonic() < deadline:
                owner = f"{name}:{held}:{busy}"
                try:
                    async with db.session() as session:
                        choice = await choose_proxy(session, policy, settings, None, owner=owner)
                except NoProxyAvailable:
                    busy += 1
                    await asyncio.sleep(0.005)
                    continue
                assert choice is not None
                # O_EXCL fails if another process holds this proxy right now.
                marker = os.path.join(locks, f"proxy-{choice.proxy_id}")
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.close(fd)
                held += 1
                await asyncio.sleep(0.002)
                os.unlink(marker)
                async with db.session() as session:
                    assert await release_proxy(session, choice.proxy_id, owner)
        finally:
            await db.dispose()
        return held, busy

    try:
        held, busy = asyncio.run(main())
    except BaseException:
        import traceback

        Path(locks, f"error-{name}").write_text(traceback.format_exc())
        raise
    Path(locks, f"result-{name}").write_text(f"{held} {busy}")


async def test_two_processes_never_hold_the_same_exclusive_proxy(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    domain_id = await _domain(db, proxy_strategy="exclusive")
    await _proxies(db, 2, map_to=domain_id)
    context = multiprocessing.get_context("spawn")
    url = settings.resolved_database_url
    workers = [
        context.Process(target=_lease_loop, args=(url, domain_id, str(tmp_path), 60, f"p{n}"))
        for n in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(330)
    errors = [p.read_text() for p in tmp_path.glob("error-*")]
    assert errors == []  # an O_EXCL clash (two holders at once) raises FileExistsError
    assert [w.exitcode for w in workers] == [0, 0, 0]
    results = [Path(tmp_path, f"result-p{n}").read_text().split() for n in range(3)]
    assert all(int(held) == 60 for held, _ in results)
    async with db.reader() as session:
        assert set(await session.scalars(select(Proxy.lease_owner))) == {None}


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # SQLite has no row locks
async def test_a_verdict_and_a_pick_of_the_same_proxy_do_not_deadlock(
    db: Database, settings: Settings
) -> None:
    """A fetch's verdict and another fetch's pick lock the proxy row, then its mapping: in
    the other order they deadlock (the verdict would hold the mapping and wait for the proxy
    while the pick holds the proxy and waits for the mapping)."""
    domain_id = await _domain(db)
    [proxy_id] = await _proxies(db, 1, map_to=domain_id)
    async with db.session() as pick:
        # The pick's statements (``choose_proxy``): lock the proxy ...
        await pick.execute(select(Proxy.id).where(Proxy.id == proxy_id).with_for_update())
        pid = await pick.scalar(text("SELECT pg_backend_pid()"))

        async def record() -> None:
            async with db.session() as session:
                await record_verdict(
                    session,
                    proxy_id,
                    "ok",
                    domain_id=domain_id,
                    response_ms=20,
                    settings=settings,
                )

        recording = asyncio.create_task(record())

        async def blocked() -> bool:  # the verdict waits for a lock the pick holds
            async with db.reader() as session:
                waiting = await session.scalar(
                    text(
                        "SELECT count(*) FROM pg_locks"
                        " WHERE NOT granted AND :pid = ANY(pg_blocking_pids(pid))"
                    ),
                    {"pid": pid},
                )
                return bool(waiting)

        await eventually(blocked, "the verdict to wait for the pick")
        # ... then update its mapping: with the verdict holding the mapping, a deadlock.
        await pick.execute(
            update(DomainProxy)
            .where(DomainProxy.domain_id == domain_id, DomainProxy.proxy_id == proxy_id)
            .values(last_used_at=utcnow())
        )
    await recording  # the pick committed; the verdict went through after it
    assert (await _mapping(db, domain_id, proxy_id)).success_count == 1
    assert (await _get(db, Proxy, proxy_id)).success_count == 1


async def _mapping(db: Database, domain_id: int, proxy_id: int) -> DomainProxy:
    async with db.reader() as session:
        row = await session.scalar(
            select(DomainProxy).where(
                DomainProxy.domain_id == domain_id, DomainProxy.proxy_id == proxy_id
            )
        )
        assert row is not None
        return row


async def test_a_lost_try_does_not_hide_the_ban_the_retry_rotates_from(
    db: Database, settings: Settings
) -> None:
    """A ban through proxy A, then a try a dead worker lost (its ``lease_expired`` row names no
    proxy): the next fetch still goes through the other proxy."""
    [task_id] = await submit(db, settings, "http://shop.test/p")
    task = (await tasks_by_id(db, [task_id]))[task_id]
    a, b = await _proxies(db, 2, map_to=task.domain_id)
    async with db.session() as session:
        for proxy_id, error_type in ((a, "blocked"), (None, "lease_expired")):
            session.add(
                CrawlAttempt(
                    task_id=task_id,
                    proxy_id=proxy_id,
                    outcome="retry",
                    error_type=error_type,
                    finished_at=utcnow(),
                )
            )
    policy = FetchPolicy(db, settings, None, "w")
    for _ in range(3):
        async with db.session() as session:
            choice = await policy.choose(
                session, _Task(task_id, task.domain_id), DomainPolicy(task.domain_id)
            )
        assert choice is not None and choice.proxy_id == b
