"""The fetch policy through the real worker pool and test site, on SQLite and PostgreSQL:
robots.txt, ban rotation, Retry-After and throttling, circuit breakers, proxy re-tests."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta
from typing import Any

from sqlalchemy import event, func, select, update

from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import Domain, DomainProxy, Event, Proxy
from forager.db.types import utcnow
from forager.fetch.fetcher_set import FetcherSet
from forager.politeness.outcomes import Outcomes
from forager.proxies.retest import retest_due
from forager.queue.door import TaskQueue
from forager.runtime import open_database
from forager.worker.pool import WorkerPool
from tests.conftest import SettingsFactory
from tests.support.crawling import add_proxy, crawl, submit, tasks_by_id
from tests.support.proxy import TestProxy
from tests.support.site import TestSite
from tests.support.waiting import entity_events, eventually, task_attempts


async def _domain(db: Database, domain_id: int) -> Domain:
    async with db.reader() as session:
        domain = await session.scalar(select(Domain).where(Domain.id == domain_id))
        assert domain is not None
        return domain


async def _set_domain(db: Database, domain_id: int, **values: Any) -> None:
    async with db.session() as session:
        await session.execute(update(Domain).where(Domain.id == domain_id).values(**values))


async def test_robots_txt_is_enforced_cached_and_refreshed(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_retries=0)
    site.set_robots("User-agent: *\nDisallow: /private/\nCrawl-delay: 0.2\n")
    allowed, denied = await submit(
        db, settings, site.url("/product/1"), site.url("/private/secret")
    )
    tasks = await crawl(db, settings, [allowed, denied])
    assert tasks[allowed].status == "completed"
    assert (tasks[denied].status, tasks[denied].error_type) == ("failed", "robots_denied")
    assert "disallows" in (tasks[denied].error_message or "")
    paths = [r.path for r in site.requests()]
    assert "/private/secret" not in paths  # denied without a request
    assert paths.count("/robots.txt") == 1  # fetched once, then cached
    assert await task_attempts(db, denied) == []
    domain_id = tasks[allowed].domain_id
    domain = await _domain(db, domain_id)
    assert domain.crawl_delay_seconds == 0.2  # Crawl-delay raised the domain's delay
    assert domain.robots_txt_content and "Disallow: /private/" in domain.robots_txt_content

    # The per-domain switch: robots.txt ignored (the page is then really requested).
    await _set_domain(db, domain_id, ignore_robots=True)
    [ignored] = await submit(db, settings, site.url("/private/other"))
    task = (await crawl(db, settings, [ignored]))[ignored]
    assert (task.status, task.error_type) == ("failed", "http_4xx")  # the site's 404
    assert "/private/other" in [r.path for r in site.requests()]

    # A day-old copy is fetched again; the new rules apply at once.
    site.set_robots("User-agent: *\nDisallow: /product/\n")
    await _set_domain(
        db,
        domain_id,
        ignore_robots=False,
        robots_txt_last_fetched=utcnow() - timedelta(seconds=settings.robots_refresh_seconds + 60),
    )
    [now_denied] = await submit(db, settings, site.url("/product/2"))
    task = (await crawl(db, settings, [now_denied]))[now_denied]
    assert (task.status, task.error_type) == ("failed", "robots_denied")
    assert [r.path for r in site.requests()].count("/robots.txt") == 2


async def test_tasks_claimed_before_robots_txt_is_fetched_read_its_state_once(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    """A crawl's first claims all say "robots.txt never fetched": one task fetches it, the
    others wait for it and then use what this process read, instead of each reading the
    domain again (a 3,000-page crawl read it 129 times in its first 0.6 s)."""
    settings = make_settings(max_retries=0)
    site.set_robots("User-agent: *\nDisallow: /private/\n")
    ids = await submit(db, settings, *[site.url(f"/product/{n}") for n in range(1, 17)])
    reads: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("SELECT domains.domain_name, domains.ignore_robots"):
            reads.append(statement)

    engines = {db.engine.sync_engine, db.read_engine.sync_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", count)
    try:
        tasks = await crawl(db, settings, ids, concurrency=16)
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", count)
    assert {t.status for t in tasks.values()} == {"completed"}
    assert [r.path for r in site.requests()].count("/robots.txt") == 1
    assert len(reads) <= 2  # under the refresh's lock: before the fetch and after it


async def test_a_new_process_reads_a_fetched_robots_txt_once(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    """Another process fetched the domain's robots.txt: a worker starting now claims many of its
    tasks at once, and all of them check robots.txt before this process has read it. One read
    of the text serves them all; each one took a connection of its own (two workers on
    PostgreSQL opened 41 to 68 sessions for 3,000 pages; 17 since)."""
    settings = make_settings(max_retries=0)
    site.set_robots("User-agent: *\nDisallow: /private/\n")
    [first] = await submit(db, settings, site.url("/product/0"))
    assert (await crawl(db, settings, [first], concurrency=1))[first].status == "completed"
    ids = await submit(db, settings, *[site.url(f"/product/{n}") for n in range(1, 17)])
    ids += await submit(db, settings, site.url("/private/1"))
    reads: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        robots = ("SELECT domains.robots_txt_content", "SELECT domains.domain_name, domains.ignore")
        if statement.startswith(robots):
            reads.append(" ".join(statement.split()[:2]).rstrip(","))

    engines = {db.engine.sync_engine, db.read_engine.sync_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", count)
    try:
        tasks = await crawl(db, settings, ids, concurrency=16)  # a new pool: nothing cached
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", count)
    assert [tasks[i].status for i in ids] == ["completed"] * 16 + ["failed"]
    assert tasks[ids[-1]].error_type == "robots_denied"
    assert [r.path for r in site.requests()].count("/robots.txt") == 1
    assert reads == ["SELECT domains.robots_txt_content"]


async def test_ban_rotates_proxy_and_counts_for_that_domain_only(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_retries=2)
    [task_id] = await submit(db, settings, site.url("/flaky/ban?fail=1&code=403", host="127.0.0.2"))
    domain_id = (await tasks_by_id(db, [task_id]))[task_id].domain_id
    await _set_domain(db, domain_id, ignore_robots=True)  # only page fetches go through proxies
    with TestProxy() as first, TestProxy(username="u", password="p@ss") as second:
        first_id = await add_proxy(db, settings, first, domain_id)
        second_id = await add_proxy(db, settings, second, domain_id)
        # Make the first the least recently used one for this domain.
        task = (await crawl(db, settings, [task_id], concurrency=1))[task_id]
    assert task.status == "completed"
    attempts = [(a.proxy_id, a.status_code, a.error_type) for a in await task_attempts(db, task_id)]
    assert attempts[0] == (first_id, 403, "blocked")  # a block page, not a plain 4xx
    assert attempts[1][0] == second_id and attempts[1][2] is None  # retried through the other
    async with db.reader() as session:
        mapping = await session.scalar(select(DomainProxy).where(DomainProxy.proxy_id == first_id))
        proxy = await session.scalar(select(Proxy).where(Proxy.id == first_id))
    assert mapping is not None and mapping.failure_count == 1  # against this domain …
    assert proxy is not None and proxy.failure_count == 0  # … not the proxy everywhere


async def test_plain_404_is_not_a_ban(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_retries=2)
    [task_id] = await submit(db, settings, site.url("/status/404", host="127.0.0.2"))
    task = (await crawl(db, settings, [task_id]))[task_id]
    assert (task.status, task.error_type, task.retry_count) == ("failed", "http_4xx", 0)


async def test_retry_after_is_obeyed_and_throttle_rises_then_decays(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_retries=1)
    host = "127.0.0.3"
    [limited] = await submit(db, settings, site.url("/status/429", host=host))
    task = (await crawl(db, settings, [limited]))[limited]
    assert (task.status, task.error_type) == ("failed", "rate_limited")
    first, second = await task_attempts(db, limited)
    assert first.finished_at is not None
    # Retry-After: 1 — the retry waited at least that long (not the 10 ms test backoff).
    assert (second.started_at - first.finished_at).total_seconds() >= 0.95
    domain = await _domain(db, task.domain_id)
    assert domain.throttle_delay_seconds is not None and domain.throttle_delay_seconds >= 1.0
    raised = domain.throttle_delay_seconds

    # Healthy answers let the delay decay back toward the configured one (0 here).
    ids = await submit(db, settings, *[site.url(f"/product/{n}", host=host) for n in range(3)])
    tasks = await crawl(db, settings, ids)
    assert {t.status for t in tasks.values()} == {"completed"}
    domain = await _domain(db, task.domain_id)
    assert domain.throttle_delay_seconds is None or domain.throttle_delay_seconds < raised / 4
    # While throttled, requests to the host were spaced by the raised delay.
    starts = sorted(r.start for r in site.requests(host=host) if r.path.startswith("/product/"))
    assert starts[1] - starts[0] >= raised / 2 - 0.05


async def test_open_domain_breaker_stops_claims_until_half_open(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(
        max_retries=0, breaker_failure_threshold=3, breaker_success_threshold=2
    )
    host = "127.0.0.4"
    failing = await submit(
        db, settings, *[site.url(f"/status/50{n}", host=host) for n in (0, 2, 4)]
    )
    tasks = await crawl(db, settings, failing, concurrency=1)
    domain_id = next(iter(tasks.values())).domain_id
    domain = await _domain(db, domain_id)
    assert (domain.breaker_state, domain.breaker_failures) == ("open", 3)
    # The seed's statistics, and the transition recorded as an event (issue 15).
    assert (domain.breaker_total_failures, domain.breaker_total_successes) == (3, 0)
    assert domain.breaker_changed_at == domain.breaker_opened_at

    good = await submit(db, settings, site.url("/product/1", host=host))
    queue = TaskQueue(db, settings)
    assert await queue.claim("w", 10) == []  # open: its tasks are not claimed
    async with db.session() as session:
        past = utcnow() - timedelta(seconds=settings.breaker_open_seconds + 1)
        await session.execute(
            update(Domain).where(Domain.id == domain_id).values(breaker_opened_at=past)
        )
    # Half-open: work flows again. One success, then another submitted once the first is
    # written (the successes of one writer's group step the breaker once).
    [first] = (await crawl(db, settings, good, concurrency=1)).values()
    more = await submit(db, settings, site.url("/product/2", host=host))
    [second] = (await crawl(db, settings, more, concurrency=1)).values()
    assert first.status == second.status == "completed"
    domain = await _domain(db, domain_id)
    assert (domain.breaker_state, domain.breaker_failures) == ("closed", 0)
    assert (domain.breaker_total_failures, domain.breaker_total_successes) == (3, 2)
    changes = [e for e in await entity_events(db, "domain", domain_id) if "breaker" in e]
    assert changes == ["breaker_open", "breaker_half_open", "breaker_closed"]


async def test_disabled_proxy_is_retested_with_backoff_and_reenabled(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(
        max_retries=1,
        proxy_failure_limit=2,
        proxy_retest_base_seconds=30,
        proxy_test_url=site.url("/product/1"),
    )
    box = SecretBox(settings)
    [task_id] = await submit(db, settings, site.url("/product/7", host="127.0.0.5"))
    domain_id = (await tasks_by_id(db, [task_id]))[task_id].domain_id
    with TestProxy(username="retest", password="pw") as proxy:
        proxy_id = await add_proxy(db, settings, proxy, domain_id)
        proxy.fail = True
        task = (await crawl(db, settings, [task_id]))[task_id]
        assert (task.status, task.error_type) == ("failed", "proxy")

        async def stored() -> Proxy:
            async with db.reader() as session:
                row = await session.scalar(select(Proxy).where(Proxy.id == proxy_id))
                assert row is not None
                return row

        disabled = await stored()
        assert not disabled.is_active and disabled.retest_at is not None

        async def make_due() -> None:
            async with db.session() as session:
                await session.execute(
                    update(Proxy).values(retest_at=utcnow() - timedelta(seconds=1))
                )

        await make_due()
        before = utcnow()
        fetchers = FetcherSet(settings)
        try:
            result = await retest_due(db, settings, box, fetchers)
        finally:
            await fetchers.aclose()
        assert (result.enabled, result.still_failing) == ([], [proxy_id])
        again = await stored()
        assert not again.is_active and again.retest_count == 1
        assert again.retest_at is not None
        assert again.retest_at >= before + timedelta(seconds=59)  # 30 s doubled

        # The proxy works again: the worker's background side task enables it.
        proxy.fail = False
        await make_due()
        pool = WorkerPool(db, settings, concurrency=1)
        runner = asyncio.create_task(pool.run())
        try:

            async def enabled_again() -> bool:
                return (await stored()).is_active

            await eventually(enabled_again, "the re-test side task to enable the proxy")
        finally:
            pool.stop()
            await runner
    enabled = await stored()
    assert (enabled.failure_count, enabled.retest_at, enabled.retest_count) == (0, None, 0)
    async with db.reader() as session:
        events = list(
            await session.scalars(
                select(Event.event)
                .where(Event.entity_type == "proxy", Event.entity_id == str(proxy_id))
                .order_by(Event.id)
            )
        )
    assert events[-2:] == ["retest_failed", "reenabled"]


async def test_required_country_without_proxy_fails_as_proxy_error(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_retries=0)
    [task_id] = await submit(db, settings, site.url("/product/3", host="127.0.0.2"))
    domain_id = (await tasks_by_id(db, [task_id]))[task_id].domain_id
    await _set_domain(db, domain_id, required_country_code="BR")
    task = (await crawl(db, settings, [task_id]))[task_id]
    assert (task.status, task.error_type) == ("failed", "proxy")
    assert "BR" in (task.error_message or "")
    assert not [r for r in site.requests() if r.path == "/product/3"]  # never went direct


async def test_exclusive_proxy_is_held_by_one_fetch_and_released(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings()
    ids = await submit(
        db, settings, *[site.url(f"/slow/{200 + n}", host="127.0.0.4") for n in range(4)]
    )
    domain_id = (await tasks_by_id(db, ids))[ids[0]].domain_id
    await _set_domain(db, domain_id, proxy_strategy="exclusive")
    with TestProxy() as proxy:
        proxy_id = await add_proxy(db, settings, proxy, domain_id)
        tasks = await crawl(db, settings, ids, concurrency=4)
    assert {t.status for t in tasks.values()} == {"completed"}
    assert {t.retry_count for t in tasks.values()} == {0}  # waiting for the lease costs no retry
    assert {t.proxy_id for t in tasks.values()} == {proxy_id}
    # One proxy, four concurrent fetches: the proxy was never in two at once.
    records = sorted(
        (r for r in site.requests(host="127.0.0.4") if r.path.startswith("/slow/")),
        key=lambda r: r.start,
    )
    assert len(records) == 4
    for before, after in itertools.pairwise(records):
        assert after.start >= before.end - 0.01, (before, after)
    async with db.reader() as session:
        stored = await session.scalar(select(Proxy).where(Proxy.id == proxy_id))
        postponed = await session.scalar(
            select(func.count()).select_from(Event).where(Event.event == "postponed")
        )
    assert stored is not None and stored.lease_owner is None  # released after each fetch
    assert postponed and postponed > 0


async def test_rate_limit_per_domain_and_proxy_spaces_requests(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings()
    host = "127.0.0.5"
    ids = await submit(db, settings, *[site.url(f"/product/{n}", host=host) for n in range(3)])
    domain_id = (await tasks_by_id(db, ids))[ids[0]].domain_id
    # One request per hour per (domain, proxy): no request goes unless the test moves the clock,
    # so the test shows the spacing itself, not how late each request happened to leave.
    await _set_domain(db, domain_id, proxy_rate_limit_rps=1 / 3600, ignore_robots=True)
    with TestProxy() as first, TestProxy() as second:
        first_id = await add_proxy(db, settings, first, domain_id)
        await add_proxy(db, settings, second, domain_id)
        # Two pools, each with its own database engine: the limit lives in the database.
        other = await open_database(settings)
        try:
            pools = [WorkerPool(d, settings, concurrency=3) for d in (db, other)]
            runners = [asyncio.create_task(p.run()) for p in pools]
            try:
                # Three tasks at once: one request through each proxy, the third task waits.
                async def two_sent_one_waiting() -> bool:
                    if first.count + second.count > 2:
                        return True  # the limit did not hold: fail at once, below
                    tasks = (await tasks_by_id(db, ids)).values()
                    waiting = [t.id for t in tasks if t.status != "completed"]
                    return len(waiting) == 1 and "postponed" in await entity_events(
                        db, "task", waiting[0]
                    )

                await eventually(two_sent_one_waiting, "two requests and one postponed task")
                assert (first.count, second.count) == (1, 1)
                async with db.reader() as session:
                    gates = list(await session.scalars(select(DomainProxy.next_request_at)))
                hour_from_now = utcnow() + timedelta(minutes=59)
                assert len(gates) == 2 and all(g is not None and g > hour_from_now for g in gates)

                # The hour passes for the first pair only: the waiting task goes through it.
                async with db.session() as session:
                    await session.execute(
                        update(DomainProxy)
                        .where(DomainProxy.proxy_id == first_id)
                        .values(next_request_at=utcnow() - timedelta(seconds=1))
                    )

                async def all_completed() -> bool:
                    tasks = (await tasks_by_id(db, ids)).values()
                    return {t.status for t in tasks} == {"completed"}

                await eventually(all_completed, "the waiting task through the first proxy")
            finally:
                for pool in pools:
                    pool.stop()
                await asyncio.gather(*runners)
        finally:
            await other.dispose()
    assert (first.count, second.count) == (2, 1)
    assert len([r for r in site.requests(host=host) if r.path.startswith("/product/")]) == 3
    assert {t.retry_count for t in (await tasks_by_id(db, ids)).values()} == {0}  # waiting is free


async def test_a_groups_answers_book_each_domains_breaker_and_throttle(
    db: Database, make_settings: SettingsFactory
) -> None:
    """The writer's one statement for a group's answers (built once per size, padded): every
    domain of the group gets its own count, a half-open breaker closes (and says so), a
    throttled domain steps its delay, and a domain outside the group is not touched."""
    settings = make_settings(breaker_success_threshold=2)
    hosts = ("a.test", "b.test", "c.test", "d.test")
    ids = await submit(db, settings, *[f"http://{h}/p" for h in hosts])
    tasks = await tasks_by_id(db, ids)
    a, b, c, outside = (t.domain_id for t in sorted(tasks.values(), key=lambda t: t.url))
    now = utcnow()
    async with db.session() as session:
        await session.execute(
            update(Domain)
            .where(Domain.id == a)
            .values(breaker_state="half_open", breaker_successes=1, breaker_changed_at=now)
        )
        await session.execute(
            update(Domain).where(Domain.id == b).values(throttle_delay_seconds=4.0)
        )
    outcomes = Outcomes(settings)
    async with db.session() as session:  # three domains: a statement for four
        await outcomes.answered_many(session, [(a, 10), (b, 10), (b, 12), (c, 10)])
    async with db.session() as session:  # one: another statement, the first one's size kept
        await outcomes.answered_many(session, [(c, 10)])
    got = {d: await _domain(db, d) for d in (a, b, c, outside)}
    assert {d: got[d].breaker_total_successes for d in got} == {a: 1, b: 2, c: 2, outside: 0}
    assert (got[a].breaker_state, got[a].breaker_successes) == ("closed", 0)
    assert "breaker_closed" in await entity_events(db, "domain", a)
    assert got[b].throttle_delay_seconds is not None and got[b].throttle_delay_seconds < 4.0
    assert got[b].breaker_state == got[c].breaker_state == "closed"
    assert got[c].throttle_delay_seconds is None
