"""Real `forager worker` processes on one database: exactly-once, politeness, crashes."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlTask, Domain, Event
from forager.db.types import utcnow
from tests.conftest import SettingsFactory
from tests.support.crawling import submit
from tests.support.site import SiteProcess
from tests.support.waiting import completions, eventually
from tests.support.workers import (
    all_up,
    count_tasks,
    kill_worker,
    logs,
    start_worker,
    stop_worker,
)

pytestmark = pytest.mark.slow

SITE_HOSTS = [f"127.0.0.{n}" for n in range(10, 30)]
SITE_PROCESS_HOSTS = SITE_HOSTS  # `site` is then the test site in its own process, on these
FREE_HOSTS = SITE_HOSTS[:10]  # no delay, at most MAX_CONCURRENT requests in flight
DELAYED_HOSTS = SITE_HOSTS[10:15]  # one request per hour: only as many as the test lets go
MAX_CONCURRENT = 2
HOUR = 3600.0
WAIT = 240  # a safety net for a loaded machine, never the thing tested


async def test_two_workers_complete_every_task_exactly_once_politely(
    db: Database, make_settings: SettingsFactory, site: SiteProcess, tmp_path: Path
) -> None:
    # A claim shuts a delayed domain's gate until the claim's lease would run out; the send
    # then sets it to send time + delay. A long lease keeps a worker slowed down by a loaded
    # machine between the two from reopening it early (nothing is killed here), and a long
    # fetch timeout keeps a slow answer from being fetched twice.
    settings = make_settings(
        default_max_concurrent_requests=MAX_CONCURRENT,
        lease_seconds=600.0,
        fetch_timeout_seconds=60.0,
    )
    # The free pages take 200 ms each: with at most 20 in flight (2 per host), they keep both
    # processes busy for a second or more (on a quiet machine one process once took them all).
    free = [site.url(f"/product/{n}?kb=4&ms=200", host=FREE_HOSTS[n % 10]) for n in range(100)]
    rounds = 3
    delayed = [
        site.url(f"/product/{1000 + 10 * n + i}", host=host)
        for n in range(rounds)
        for i, host in enumerate(DELAYED_HOSTS)
    ]
    ids = await submit(db, settings, *delayed)
    async with db.session() as session:
        # robots.txt is skipped there: fetching it would take the hour-long turn first.
        await session.execute(
            update(Domain)
            .where(Domain.domain_name.in_(DELAYED_HOSTS))
            .values(crawl_delay_seconds=HOUR, ignore_robots=True)
        )
    workers = [start_worker(settings, tmp_path, f"w{i}", concurrency=16) for i in range(2)]
    try:
        # The free pages come once both processes are up: on a loaded machine the first one
        # up could otherwise take them all while the other is still starting.
        await all_up(db, workers, timeout=WAIT, context=lambda: logs(tmp_path))
        ids += await submit(db, settings, *free)
        # Across both processes, each opening of a delayed domain's gate lets one request out.
        for sent in range(1, rounds + 1):
            await eventually(
                lambda n=sent: _round_over(db, site, n),
                f"round {sent}",
                timeout=WAIT,
                context=lambda: logs(tmp_path),
            )
            per_host = Counter(r.host for r in site.requests() if r.host in DELAYED_HOSTS)
            assert per_host == dict.fromkeys(DELAYED_HOSTS, sent)
            # The hour counts from when the request went out, not from the claim before it
            # (a worker slow in between would otherwise send the next one early).
            for gate, started, _ in (await _gates(db)).values():
                assert gate is not None and started is not None
                assert gate - timedelta(seconds=HOUR) >= started
            async with db.session() as session:  # the hour passes
                await session.execute(
                    update(Domain)
                    .where(Domain.domain_name.in_(DELAYED_HOSTS))
                    .values(next_fetch_at=utcnow() - timedelta(seconds=1))
                )
        total = len(ids)
        await eventually(
            lambda: _at_least(db, "completed", total),
            "every task",
            timeout=WAIT,
            context=lambda: logs(tmp_path),
        )
    finally:
        codes = [stop_worker(w) for w in workers]
    assert codes == [0, 0]  # SIGTERM is a clean exit

    # Exactly once: one completion per task, one fetch per URL, none lost.
    done = await completions(db)
    assert set(done) == {str(i) for i in ids} and set(done.values()) == {1}
    fetched = Counter(r.path for r in site.requests() if r.path.startswith("/product/"))
    assert len(fetched) == total and set(fetched.values()) == {1}
    async with db.reader() as session:
        workers_seen = set(await session.scalars(select(CrawlAttempt.worker_id).distinct()))
    assert len(workers_seen) == 2  # both processes took part
    # Never more than MAX_CONCURRENT requests in flight per host, whichever process sent them.
    concurrency = site.log()["max_concurrency"]
    assert max(concurrency[h] for h in FREE_HOSTS) <= MAX_CONCURRENT, concurrency


async def test_killed_worker_tasks_complete_after_lease_expiry(
    db: Database, make_settings: SettingsFactory, site: SiteProcess, tmp_path: Path
) -> None:
    # Long leases: however slow a loaded machine makes the heartbeats, no live worker loses
    # one; the stranded leases are then made to run out, as the time would.
    # Held fetches wait for the kill, however long the machine takes to get there.
    settings = make_settings(
        lease_seconds=120.0, heartbeat_seconds=1.0, fetch_timeout_seconds=120.0
    )
    total, in_hand = 12, 4
    urls = [site.url(f"/hold/doomed?n={n}", host=SITE_HOSTS[n % 6]) for n in range(total)]
    ids = await submit(db, settings, *urls)
    doomed = start_worker(settings, tmp_path, "doomed", concurrency=in_hand)
    try:
        await eventually(
            lambda: site.held("doomed") == in_hand,
            "fetches in hand",
            timeout=WAIT,
            context=lambda: logs(tmp_path),
        )
    finally:
        kill_worker(doomed)  # no chance to release anything
    async with db.reader() as session:
        holders = dict(
            (
                await session.execute(
                    select(CrawlTask.id, CrawlTask.lease_owner).where(
                        CrawlTask.status.in_(["queued", "crawling"])
                    )
                )
            ).all()
        )
    held = set(holders)
    assert len(held) == in_hand
    async with db.session() as session:  # the lease time passes
        await session.execute(
            update(CrawlTask)
            .where(CrawlTask.id.in_(held))
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    site.release("doomed")
    survivor = start_worker(settings, tmp_path, "survivor", concurrency=total)
    try:
        await eventually(
            lambda: _at_least(db, "completed", total),
            "every task",
            timeout=WAIT,
            context=lambda: logs(tmp_path),
        )
    finally:
        assert stop_worker(survivor) == 0
    done = await completions(db)
    assert set(done) == {str(i) for i in ids} and set(done.values()) == {1}
    async with db.reader() as session:
        retried = dict(
            (
                await session.execute(
                    select(CrawlTask.id, CrawlTask.retry_count).where(CrawlTask.id.in_(held))
                )
            ).all()
        )
        expired = set(
            await session.scalars(select(Event.entity_id).where(Event.event == "lease_expired"))
        )
        lost = (
            await session.execute(
                select(CrawlAttempt.task_id, CrawlAttempt.worker_id, CrawlAttempt.phase).where(
                    CrawlAttempt.error_type == "lease_expired"
                )
            )
        ).all()
    assert set(retried.values()) == {1}  # the crash consumed exactly one retry each
    assert expired == {str(i) for i in held}
    # Each try the killed worker was making is in its task's history: one row, its worker's.
    assert sorted((r.task_id, r.worker_id, r.phase) for r in lost) == sorted(
        (i, holders[i], "fetch") for i in held
    )


async def _round_over(db: Database, site: SiteProcess, sent: int) -> bool:
    """Each delayed host has had ``sent`` requests, recorded as attempts, and its gate is shut
    for the hour again (or one had more: the gate did not hold, which the caller reports)."""
    per_host = Counter(r.host for r in site.requests() if r.host in DELAYED_HOSTS)
    if any(n > sent for n in per_host.values()):
        return True
    if any(per_host[h] < sent for h in DELAYED_HOSTS):
        return False
    gates = await _gates(db)
    closed_until = utcnow() + timedelta(minutes=59)
    return all(n == sent and g is not None and g > closed_until for g, _, n in gates.values())


async def _gates(db: Database) -> dict[str, tuple[datetime | None, datetime | None, int]]:
    """Per delayed host: (its gate, when its last fetch attempt started, how many attempts)."""
    async with db.reader() as session:
        rows = await session.execute(
            select(
                Domain.domain_name,
                Domain.next_fetch_at,
                func.max(CrawlAttempt.started_at),
                func.count(CrawlAttempt.id),
            )
            .outerjoin(CrawlTask, CrawlTask.domain_id == Domain.id)
            .outerjoin(CrawlAttempt, CrawlAttempt.task_id == CrawlTask.id)
            .where(Domain.domain_name.in_(DELAYED_HOSTS))
            .group_by(Domain.domain_name, Domain.next_fetch_at)
        )
        return {name: (gate, started, n) for name, gate, started, n in rows}


async def _at_least(db: Database, status: str, n: int) -> bool:
    return await count_tasks(db, status) >= n
