"""Chaos stays a test: two `forager worker` processes crawl while workers are SIGKILLed and
(on PostgreSQL) every database connection is terminated once. Nothing is lost, nothing is
done twice: one `completed` event and one product per task, no lease left behind.

The bounded version of the run tried by hand (3,000 tasks, 22 kills, a PostgreSQL restart):
the shared PostgreSQL server is not restarted here, its connections are cut instead.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from forager.db.engine import Database
from tests.conftest import PG_ADMIN_DB, PG_HOST, PG_USER, SettingsFactory
from tests.support.crawling import submit
from tests.support.site import SiteProcess
from tests.support.waiting import eventually
from tests.support.workers import (
    all_up,
    assert_each_done_once,
    count_tasks,
    kill_worker,
    leased_by,
    logs,
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
