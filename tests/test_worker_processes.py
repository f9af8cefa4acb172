"""Real `forager worker` processes on one database: exactly-once, politeness, crashes."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import String, func, select

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlTask, Event
from tests.conftest import SettingsFactory
from tests.support.crawling import submit
from tests.support.site import RequestRecord, SiteProcess

pytestmark = pytest.mark.slow

DELAY = 0.2
MAX_CONCURRENT = 2
# The site stamps a request when its handler starts, a little after it arrived; two requests
# sent DELAY apart can be stamped a little closer. A broken gate gives gaps of ~0 s.
CLOCK_SLACK = 0.03
SITE_HOSTS = [f"127.0.0.{n}" for n in range(10, 30)]


@pytest.fixture(scope="module")
def site_process() -> Iterator[SiteProcess]:
    with SiteProcess(SITE_HOSTS) as site:
        yield site


@pytest.fixture
def site(site_process: SiteProcess) -> SiteProcess:
    """The test site in its own process, so its request times are not skewed by this one."""
    site_process.reset()
    return site_process


def _start_worker(
    settings: Settings, tmp_path: Path, name: str, concurrency: int
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "FORAGER_DATABASE_URL": settings.resolved_database_url,
        "FORAGER_DATA_DIR": str(settings.data_dir),
        "FORAGER_SECRET_KEY": settings.secret_key.get_secret_value() if settings.secret_key else "",
        "FORAGER_POLL_SECONDS": "0.05",
        "FORAGER_SCHEDULER_SECONDS": "0.5",
        "FORAGER_HEARTBEAT_SECONDS": str(settings.heartbeat_seconds),
        "FORAGER_LEASE_SECONDS": str(settings.lease_seconds),
        "FORAGER_RETRY_BASE_SECONDS": "0.05",
        "FORAGER_RETRY_MAX_SECONDS": "0.5",
        "FORAGER_LOG_LEVEL": "WARNING",
    }
    with (tmp_path / f"{name}.log").open("wb") as log:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, "-m", "forager.cli", "worker", "--concurrency", str(concurrency)],
            env=env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=30)


async def _count(db: Database, status: str) -> int:
    async with db.reader() as session:
        return (
            await session.scalar(
                select(func.count()).select_from(CrawlTask).where(CrawlTask.status == status)
            )
            or 0
        )


async def _wait_for(
    db: Database, status: str, n: int, procs: list[subprocess.Popen[bytes]], timeout: float
) -> None:
    async with asyncio.timeout(timeout):
        while await _count(db, status) < n:
            for proc in procs:
                assert proc.poll() is None, f"worker exited early with {proc.returncode}"
            await asyncio.sleep(0.2)


async def _completions_per_task(db: Database) -> Counter[str]:
    async with db.reader() as session:
        rows = await session.scalars(
            select(Event.entity_id).where(Event.entity_type == "task", Event.event == "completed")
        )
        return Counter(rows)


async def test_two_workers_complete_every_task_exactly_once_politely(
    db: Database, make_settings: SettingsFactory, site: SiteProcess, tmp_path: Path
) -> None:
    settings = make_settings(
        default_crawl_delay_seconds=DELAY, default_max_concurrent_requests=MAX_CONCURRENT
    )
    total = 1000 if db.dialect == "postgresql" else 300
    urls = [
        site.url(f"/product/{n}?kb=4", host=SITE_HOSTS[n % len(SITE_HOSTS)]) for n in range(total)
    ]
    ids = await submit(db, settings, *urls)
    workers = [_start_worker(settings, tmp_path, f"w{i}", concurrency=16) for i in range(2)]
    try:
        await _wait_for(db, "completed", total, workers, timeout=240)
    finally:
        codes = [_stop(w) for w in workers]
    assert codes == [0, 0]  # SIGTERM is a clean exit

    # Exactly once: one completion per task, one fetch per URL, none lost.
    completions = await _completions_per_task(db)
    assert set(completions) == {str(i) for i in ids}
    assert set(completions.values()) == {1}
    fetched = Counter(r.path for r in site.requests() if r.path.startswith("/product/"))
    assert len(fetched) == total
    assert set(fetched.values()) == {1}
    async with db.reader() as session:
        workers_seen = set(await session.scalars(select(CrawlAttempt.worker_id).distinct()))
    assert len(workers_seen) == 2  # both processes took part

    # Politeness held across both processes: per host, never faster than the delay and
    # never more than MAX_CONCURRENT requests in flight.
    by_host: dict[str, list[RequestRecord]] = defaultdict(list)
    for record in site.requests():
        by_host[record.host].append(record)
    for records in by_host.values():
        records.sort(key=lambda r: r.start)
        for a, b in itertools.pairwise(records):
            if b.start - a.start < DELAY - CLOCK_SLACK:
                async with db.reader() as session:
                    rows = (
                        await session.execute(
                            select(Event.entity_id, Event.event, Event.details, Event.created_at)
                            .join(CrawlTask, Event.entity_id == func.cast(CrawlTask.id, String))
                            .where(
                                Event.entity_type == "task",
                                CrawlTask.url.in_(
                                    [site.url(a.path, a.host), site.url(b.path, b.host)]
                                ),
                            )
                            .order_by(Event.id)
                        )
                    ).all()
                detail = "\n".join(f"{r[0]} {r[1]} {r[2]} {r[3].timestamp():.6f}" for r in rows)
                raise AssertionError(f"too close: {a} then {b}\n{detail}")
    assert max(site.log()["max_concurrency"].values()) <= MAX_CONCURRENT


async def test_killed_worker_tasks_complete_after_lease_expiry(
    db: Database, make_settings: SettingsFactory, site: SiteProcess, tmp_path: Path
) -> None:
    settings = make_settings(lease_seconds=3.0, heartbeat_seconds=1.0)
    total = 60
    ids = await submit(
        db,
        settings,
        *[
            site.url(f"/slow/{2000 + n}", host=SITE_HOSTS[n % len(SITE_HOSTS)])
            for n in range(total)
        ],
    )
    doomed = _start_worker(settings, tmp_path, "doomed", concurrency=10)
    try:
        await _wait_for(db, "crawling", 5, [doomed], timeout=60)
    finally:
        doomed.send_signal(signal.SIGKILL)  # no chance to release anything
        doomed.wait(timeout=10)
    async with db.reader() as session:
        held = set(
            await session.scalars(
                select(CrawlTask.id).where(CrawlTask.status.in_(["queued", "crawling"]))
            )
        )
    assert len(held) >= 5
    survivor = _start_worker(settings, tmp_path, "survivor", concurrency=30)
    try:
        await _wait_for(db, "completed", total, [survivor], timeout=120)
    finally:
        assert _stop(survivor) == 0
    completions = await _completions_per_task(db)
    assert set(completions) == {str(i) for i in ids}
    assert set(completions.values()) == {1}
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
    assert set(retried.values()) == {1}  # the crash consumed exactly one retry each
    assert expired == {str(i) for i in held}
