"""Celery dispatch as it runs for real: `forager relay` and two `forager celery-worker` processes
against the machine's RabbitMQ, reached through a forwarder so its connections can be cut.

A Celery worker is SIGKILLed while it holds tasks, the relay is SIGKILLed while tasks it claimed
wait, and every connection to RabbitMQ is cut while tasks are in flight. Nothing is lost,
nothing is done twice: one `completed` event and one product per task, no lease left behind,
the outbox fully published, the per-domain concurrency limit held throughout.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import func, select

from forager.db.engine import Database
from forager.db.models import CrawlTask, DispatchOutbox
from forager.queue.dispatch import OWNER_PREFIX
from tests.conftest import SettingsFactory
from tests.support.crawling import submit
from tests.support.forward import Forwarder
from tests.support.rabbit import RABBIT
from tests.support.site import SiteProcess
from tests.support.waiting import eventually
from tests.support.workers import (
    all_up,
    assert_each_done_once,
    count_tasks,
    kill_worker,
    leased_by,
    logs,
    start_forager,
    stop_worker,
)

pytestmark = pytest.mark.slow

SITE_HOSTS = [f"127.0.0.{n}" for n in range(80, 88)]
SITE_PROCESS_HOSTS = SITE_HOSTS  # `site` is then the test site in its own process, on these
TOTAL = 160
CONCURRENCY = 6
PER_DOMAIN = 3  # max_concurrent_requests of every domain
WAIT = 240  # a safety net for a loaded machine, never the thing tested


# PostgreSQL only in the suite: Celery dispatch is how a site with several hosts runs, and they
# share PostgreSQL; the queue side of Celery dispatch runs on both engines in
# tests/test_celery_dispatch.py. FORAGER_CELERY_SQLITE=1 runs this one on SQLite as well.
ENGINES = (
    ["postgresql", "sqlite"] if os.environ.get("FORAGER_CELERY_SQLITE") == "1" else ["postgresql"]
)


@pytest.mark.parametrize("db_url", ENGINES, indirect=True)
async def test_kills_and_a_cut_broker_lose_nothing_and_repeat_nothing(
    db: Database,
    make_settings: SettingsFactory,
    site: SiteProcess,
    queue_prefix: str,
    tmp_path: Path,
) -> None:
    with Forwarder("127.0.0.1", [f"{RABBIT[0]}:{RABBIT[1]}"]) as rabbit:
        broker = f"amqp://guest:guest@{rabbit.address(0)}//"
        settings = make_settings(
            dispatch="celery",
            celery_broker_url=broker,
            celery_queue_prefix=queue_prefix,
            lease_seconds=3.0,
            heartbeat_seconds=1.0,
            max_retries=10,
            fetch_timeout_seconds=30.0,
            celery_max_queued=12,
            default_max_concurrent_requests=PER_DOMAIN,  # the domains submit creates
        )
        # Slow pages (150 ms): every strike finds fetches in flight.
        urls = [
            site.url(f"/product/{n}?kb=2&ms=150", host=SITE_HOSTS[n % len(SITE_HOSTS)])
            for n in range(TOTAL)
        ]

        def start(name: str, *args: str) -> subprocess.Popen[bytes]:
            return start_forager(settings, tmp_path, name, args)

        def celery_worker(name: str) -> subprocess.Popen[bytes]:
            return start(name, "celery-worker", "--concurrency", str(CONCURRENCY))

        relay = start("relay", "relay")
        workers = [celery_worker(f"c{i}") for i in range(2)]
        context = lambda: logs(tmp_path)  # noqa: E731

        async def progress(share: float, what: str) -> None:
            async def done() -> bool:
                return await count_tasks(db, "completed") >= TOTAL * share

            await eventually(done, what, timeout=WAIT, context=context)

        try:
            # The work comes once both Celery workers are up: on a loaded machine the first one
            # up could otherwise run it all before the first victim holds a task.
            await all_up(db, workers, "celery", timeout=WAIT, context=context)
            ids = await submit(db, settings, *urls)
            # 1. A Celery worker dies mid-task: its leases expire, the relay's scheduler makes
            # the tasks due again and they are claimed and published anew.
            await eventually(
                lambda: leased_by(db, workers[0], "celery"),
                "the first Celery worker to hold tasks",
                timeout=WAIT,
                context=context,
            )
            kill_worker(workers[0])
            workers[0] = celery_worker("c0-restarted")
            await progress(0.25, "progress after the Celery worker's kill")

            # 2. The relay dies while tasks it claimed wait (some perhaps not yet published):
            # the next relay publishes its outbox; claims left in RabbitMQ still run.
            await eventually(
                lambda: _waiting_for(db, relay),
                "tasks claimed by the relay",
                timeout=WAIT,
                context=context,
            )
            kill_worker(relay)
            relay = start("relay-restarted", "relay")
            await progress(0.5, "progress after the relay's kill")

            # 3. RabbitMQ goes away mid-task: every connection (relay's, workers') is cut.
            await eventually(
                lambda: leased_by(db, workers[1], "celery"),
                "the second Celery worker to hold tasks",
                timeout=WAIT,
                context=context,
            )
            rabbit.restart()
            # Each worker reconnects and consumes again: the held pages submitted after the cut
            # fill every slot of both (one worker alone can fetch only CONCURRENCY at once).
            late = [
                site.url(f"/hold/after-cut?n={TOTAL + n}", host=SITE_HOSTS[n % len(SITE_HOSTS)])
                for n in range(2 * CONCURRENCY)
            ]
            ids += await submit(db, settings, *late)
            await eventually(
                lambda: site.held("after-cut") == len(late),
                "both Celery workers to fetch after the cut",
                timeout=WAIT,
                context=context,
            )
            site.release("after-cut")
            await progress(1.0 + len(late) / TOTAL, "every task after the broker's cut")
            await all_up(db, workers, "celery", timeout=WAIT)
        finally:
            codes = [stop_worker(p) for p in (relay, *workers)]
    assert codes == [0, 0, 0], logs(tmp_path)

    await assert_each_done_once(db, ids)
    async with db.reader() as session:
        unsent = await session.scalar(
            select(func.count()).select_from(DispatchOutbox).where(DispatchOutbox.sent_at.is_(None))
        )
    assert unsent == 0  # the dead relay's outbox was published by the next one
    # Politeness held across processes and restarts: the site saw at most PER_DOMAIN requests
    # at once per host.
    concurrency = site.log()["max_concurrency"]
    assert max(concurrency[h] for h in SITE_HOSTS) <= PER_DOMAIN, concurrency


async def _waiting_for(db: Database, relay: subprocess.Popen[bytes]) -> int:
    """How many tasks the relay ``relay`` claimed that no Celery worker has taken yet."""
    async with db.reader() as session:
        n = await session.scalar(
            select(func.count())
            .select_from(CrawlTask)
            .where(
                CrawlTask.status == "queued",
                CrawlTask.lease_owner.like(f"{OWNER_PREFIX}%:{relay.pid}:%"),
            )
        )
        return int(n or 0)
