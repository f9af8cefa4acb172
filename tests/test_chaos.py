"""Chaos stays a test: two `forager worker` processes crawl while workers are SIGKILLed and
(on PostgreSQL) every database connection is terminated once. Nothing is lost, nothing is
done twice: one `completed` event and one successful attempt per task, its product, no lease
left behind. And a worker frozen (SIGSTOP) past its lease, then resumed while another process
holds its task, has its late result discarded: the lease-owner guard, across processes.

The bounded version of the run tried by hand (3,000 tasks, 22 kills, a PostgreSQL restart):
the shared PostgreSQL server is not restarted here, its connections are cut instead.
"""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import select, update

from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlTask
from forager.db.types import utcnow
from tests.conftest import PG_ADMIN_DB, PG_HOST, PG_USER, SettingsFactory
from tests.support.crawling import submit
from tests.support.site import SiteProcess
from tests.support.waiting import completions, event_details, eventually, task_attempts
from tests.support.workers import (
    all_up,
    assert_each_done_once,
    count_tasks,
    kill_worker,
    leased_by,
    logs,
    pause_worker,
    resume_worker,
    start_worker,
    stop_worker,
)

pytestmark = pytest.mark.slow

SITE_HOSTS = [f"127.0.0.{n}" for n in range(60, 80)]
SITE_PROCESS_HOSTS = SITE_HOSTS  # `site` is then the test site in its own process, on these
TOTAL = 240
KILLS = 3
CONCURRENCY = 8
WAIT = 240  # a safety net for a loaded machine, never the thing tested


async def test_kills_and_cut_connections_lose_nothing_and_repeat_nothing(
    db: Database, make_settings: SettingsFactory, site: SiteProcess, tmp_path: Path
) -> None:
    # Short leases: a killed worker's tasks come back within seconds. Retries to spare: a
    # task caught by two kills must still complete.
    settings = make_settings(
        lease_seconds=3.0, heartbeat_seconds=1.0, max_retries=10, fetch_timeout_seconds=30.0
    )
    urls = [site.url(f"/product/{n}?kb=2", host=SITE_HOSTS[n % 20]) for n in range(TOTAL)]
    workers = [start_worker(settings, tmp_path, f"w{i}", CONCURRENCY) for i in range(2)]

    async def completed(n: int) -> bool:
        return await count_tasks(db, "completed") >= n

    try:
        # The work comes once both are up: on a loaded machine the first one up could otherwise
        # finish it all before the first victim holds a task.
        await all_up(db, workers, timeout=WAIT)
        ids = await submit(db, settings, *urls)
        for kill in range(1, KILLS + 1):
            slot = kill % 2
            victim = workers[slot]
            # Strike while the victim holds leases: they can only come back by expiring.
            await eventually(
                lambda v=victim: leased_by(db, v),
                f"worker {victim.pid} to hold tasks",
                timeout=WAIT,
                context=lambda: logs(tmp_path),
            )
            kill_worker(victim)
            workers[slot] = start_worker(settings, tmp_path, f"w{slot}-{kill}", CONCURRENCY)
            if kill == 2 and not db.is_sqlite:
                assert await _terminate_connections(db) > 0
            await eventually(
                lambda k=kill: completed(k * TOTAL // (KILLS + 1)),
                f"progress after kill {kill}",
                timeout=WAIT,
                context=lambda: logs(tmp_path),
            )
        await eventually(
            lambda: completed(TOTAL), "every task", timeout=WAIT, context=lambda: logs(tmp_path)
        )
        # The graceful stop is checked on workers that are up (a worker started after the last
        # kill may still be importing when the work runs out).
        await all_up(db, workers, timeout=WAIT)
    finally:
        codes = [stop_worker(w) for w in workers]
    assert codes == [0, 0], logs(tmp_path)

    await assert_each_done_once(db, ids)


async def test_a_worker_frozen_past_its_lease_has_its_late_result_discarded(
    db: Database, make_settings: SettingsFactory, site: SiteProcess, tmp_path: Path
) -> None:
    # The site answers /turn/<key> one request at a time, when told: the frozen worker's fetch
    # is answered while it is stopped, the fetch of the worker that took the task over waits
    # until the resumed one has tried to write its result.
    # A long lease, ended by the test once the worker is stopped: with a short one (3 s) a
    # loaded machine could starve the worker past it before it was stopped (its pause waits for
    # a moment outside a transaction), and the other took the task over while the first request
    # was still held at the site: two held, "the site to answer it" never came.
    settings = make_settings(lease_seconds=120.0, heartbeat_seconds=0.5, fetch_timeout_seconds=60.0)
    key = "frozen"
    one_parser = {"FORAGER_PARSE_PROCESSES": "1"}  # one page at a time: quicker to start
    workers = [start_worker(settings, tmp_path, f"w{i}", 1, extra_env=one_parser) for i in range(2)]

    def waiting_at_site(n: int) -> bool:
        return site.held(key) == n

    async def holder() -> subprocess.Popen[bytes] | None:
        for worker in workers:
            if await leased_by(db, worker):
                return worker
        return None

    try:
        await all_up(db, workers, timeout=WAIT)
        [task_id] = await submit(db, settings, site.url(f"/turn/{key}"))
        frozen = await eventually(holder, "a worker to hold the task", timeout=WAIT)
        [other] = [w for w in workers if w is not frozen]
        await eventually(lambda: waiting_at_site(1), "its request at the site", timeout=WAIT)
        await pause_worker(db, frozen)
        site.let_one(key)  # the answer waits in the frozen process's socket
        await eventually(lambda: waiting_at_site(0), "the site to answer it", timeout=WAIT)

        # Its lease runs out while it is stopped (a stopped process sends no heartbeat: nothing
        # extends it); the other reaps it and takes the task.
        assert await leased_by(db, frozen) == {task_id}
        async with db.session() as session:
            await session.execute(
                update(CrawlTask)
                .where(CrawlTask.id == task_id)
                .values(lease_expires_at=utcnow() - timedelta(seconds=1))
            )
        await eventually(
            lambda: leased_by(db, other),
            "the other worker to take the task over",
            timeout=WAIT,
            context=lambda: logs(tmp_path),
        )
        await eventually(lambda: waiting_at_site(1), "the other's request", timeout=WAIT)

        async def late_result() -> CrawlAttempt | None:
            # The frozen worker's own fetch (the site answered it: 200), not a row another
            # process may write for it when its lease is reaped.
            mine = f":{frozen.pid}:worker:"
            rows = await task_attempts(db, task_id)
            return next((a for a in rows if mine in (a.worker_id or "") and a.status_code), None)

        resume_worker(frozen)  # it finishes the fetch it was answered and tries to write it
        late = await eventually(
            late_result, "the resumed worker's result", timeout=WAIT, context=lambda: logs(tmp_path)
        )
        assert late.outcome == "discarded", "a worker wrote a task it no longer held"

        site.release(key)
        await eventually(
            lambda: count_tasks(db, "completed"), "the task done", timeout=WAIT,
            context=lambda: logs(tmp_path),
        )  # fmt: skip
    finally:
        site.release(key)  # nothing left waiting at the site, whatever failed
        for w in workers:
            resume_worker(w)
        codes = [stop_worker(w) for w in workers]
    assert codes == [0, 0], logs(tmp_path)

    # Done once, by the worker holding it (the other): one success, one `completed` event, the
    # task pointing at its page.
    attempts = await task_attempts(db, task_id)
    [success] = [a for a in attempts if a.outcome == "success"]
    assert (await completions(db))[str(task_id)] == 1
    [completed] = [d for e, d in await event_details(db, "task", task_id) if e == "completed"]
    assert completed["worker"] == success.worker_id
    assert late.page_path != success.page_path  # two fetches, two stored pages
    async with db.reader() as session:
        page = await session.scalar(select(CrawlTask.html_path).where(CrawlTask.id == task_id))
    assert page == success.page_path  # the task points at the page of the write that counted


async def _terminate_connections(db: Database) -> int:
    """Cut every connection to the test's database (the workers' and this process's pool)."""
    name = db.engine.url.database
    admin = await asyncpg.connect(host=PG_HOST, user=PG_USER, database=PG_ADMIN_DB, timeout=10)
    try:
        cut: int = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
    finally:
        await admin.close()
    return cut
