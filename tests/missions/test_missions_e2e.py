"""End to end: real worker-service and writer processes, proxies and the ad library on
loopback, the orchestrator in this process. The full run, the killed orchestrator and the two
runners run on SQLite and PostgreSQL; each other scenario on one of them (alternately): its
statements are the mission store's, which test_missions_store.py runs on both."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import func, select

from forager.apikeys import create_key
from forager.config import Settings, load_settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import Ad, Event, Mission, Proxy, WorkerService
from forager.db.types import utcnow
from forager.missions import admin, control, reports
from forager.missions.runner import MissionRunner
from forager.runtime import open_database
from tests.conftest import SettingsFactory, service_missing
from tests.missions.conftest import Fleet
from tests.missions.fleet import (
    API_KEY,
    FAST,
    OrchestratorProcess,
    ServeProcess,
    events,
    missions,
    names,
    register,
    run_until_idle,
    running,
    wait_for,
)
from tests.support.agents import free_port

pytestmark = pytest.mark.slow

# Seed §10.2, for each mission's own events (session events are the service's).
SEQUENCE = [
    "mission_queued",
    "mission_assigned",
    "scrape_started",
    "scrape_completed",
    "writer_started",
    "writer_completed",
    "mission_completed",
]
DAY = date(2026, 3, 1)
CHROMIUM = Path("/usr/bin/chromium")
# Processes that get killed: the next one waits for the lease to expire.
SHORT_LEASE = {"mission_leader_lease_seconds": 3.0}
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


async def _ads_stored(fleet: Fleet, first: date, last: date) -> int:
    """Ads of those days in the writer's database."""
    ads = Database(fleet.writer_db)
    try:
        async with ads.reader() as session:
            found = await session.scalar(
                select(func.count()).select_from(Ad).where(Ad.start_date.between(first, last))
            )
    finally:
        await ads.dispose()
    return int(found or 0)


async def _create(db: Database, days: int, start: date = DAY, **spec: object) -> list[int]:
    created = await admin.create(
        db,
        admin.MissionSpec(
            start,
            start + timedelta(days=days - 1),
            str(spec.get("media_type", "all")),
            tuple(spec.get("languages", ("pt", "en", "es"))),  # type: ignore[arg-type]
            split_by_day=True,
        ),
        queue=True,
        by="test",
        max_span_days=60,
    )
    return [m.id for m in created]


async def _whole_fleet(
    db: Database, settings: Settings, fleet: Fleet, proxies: list[Any] | None = None
) -> None:
    await register(
        db,
        settings,
        workers=[w.url for w in fleet.workers],
        writers=[fleet.writer.url],
        proxies=fleet.proxies if proxies is None else proxies,
    )


async def test_twenty_missions_complete_with_the_seed_event_sequence(
    db: Database, settings: Settings, fleet: Fleet
) -> None:
    fleet.site.set_ads(per_day=30)
    await _whole_fleet(db, settings, fleet)
    ids = await _create(db, 20)
    await run_until_idle(db, settings)
    done = await missions(db)
    assert [(m.status, m.checkpoint, m.ads_count, m.retry_count) for m in done] == [
        ("completed", "finalizado", 30, 0)
    ] * 20
    for mission_id in ids:
        assert await names(db, mission_id) == SEQUENCE, mission_id
        everything = await names(db, mission_id, progress=True)
        scraping = everything[
            everything.index("scrape_started") : everything.index("scrape_completed")
        ]
        assert set(scraping[1:]) <= {"scrape_progress"}
        writing = everything[
            everything.index("writer_started") : everything.index("writer_completed")
        ]
        assert set(writing[1:]) <= {"writer_progress"}
    async with db.reader() as session:
        held = await session.scalar(
            select(func.count()).select_from(Proxy).where(Proxy.in_use_by_worker_id.is_not(None))
        )
        services = list(await session.scalars(select(WorkerService)))
    stored = await _ads_stored(fleet, DAY, DAY + timedelta(days=19))
    assert stored == 600  # 20 days x 30 ads, each once
    assert held == 0  # §5.5: every proxy given back
    assert {(s.status, s.session_count, s.current_mission_id) for s in services} == {
        ("idle", 0, None)
    }
    assert not (await control.read(db)).run_requested
    # Sessions: 5 missions each at most (session_limit), a new proxy every time.
    assigned: dict[str, int] = defaultdict(int)
    for m in done:
        assigned[str(m.worker_id)] += 1
    for service in services:
        log = list(await events(db, "worker_service", service.id))
        started = [e.details["proxy_name"] for e in log if e.event == "session_started"]
        ready = [e for e in log if e.event == "session_ready"]
        assert len(started) == len(ready) >= -(-assigned[str(service.id)] // 5)
        assert all(a != b for a, b in itertools.pairwise(started))
        assert log[-1].event == "session_terminated"
    # Seed §10.3 on real data.
    since = utcnow() - timedelta(hours=1)
    async with db.reader() as session:
        performance = await reports.worker_performance(session, since)
        trouble = await reports.proxy_trouble(session, since)
        timeline = await reports.timeline(session, done[0])
        failures = await reports.failures(session, since, 10)
    assert sum(p.completed_count for p in performance) == 20
    assert all(p.failed_count == 0 and p.avg_duration_ms for p in performance)
    assert [t.session_failures for t in trouble] == [0, 0, 0] and failures == []
    assert [e.event for e in timeline if not e.event.endswith("_progress")] == SEQUENCE
    # The scrapes really went through the sessions' proxies to the ad library.
    assert sum(1 for p in fleet.proxies for r in p.requests if "/ads?" in r) >= 40


# -- faults, each as the seed prescribes ------------------------------------------------------


async def _one_worker(db: Database, settings: Settings, fleet: Fleet, **overrides: str) -> None:
    await register(
        db,
        settings,
        workers=[fleet.workers[0].url],
        writers=[overrides.get("writer", fleet.writer.url)],
        proxies=fleet.proxies,
    )


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_a_stuck_session_rotates_the_proxy(
    db: Database, settings: Settings, fleet: Fleet
) -> None:
    fleet.site.set_ads(per_day=5)
    fleet.workers[0].faults(session="stuck", session_times=1)
    await _one_worker(db, settings, fleet)
    ids = await _create(db, 2, date(2026, 4, 1))
    await run_until_idle(db, settings)
    assert [(m.status, m.retry_count) for m in await missions(db)] == [("completed", 0)] * 2
    log = await events(db, "worker_service", 1)
    kinds = [e.event for e in log]
    assert kinds[:5] == [
        "session_started",
        "session_failed",
        "proxy_rotated",
        "session_started",
        "session_ready",
    ]
    first, failed, rotated, second = log[0], log[1], log[2], log[3]
    assert failed.details["error_code"] == "ERROR102"
    assert failed.details["proxy_name"] == first.details["proxy_name"]
    assert rotated.details["old_proxy"] == first.details["proxy_name"]
    assert (
        rotated.details["new_proxy"] == second.details["proxy_name"] != rotated.details["old_proxy"]
    )
    assert rotated.details["reason"] == "ERROR102"
    async with db.reader() as session:
        stuck = await session.scalar(select(Proxy).where(Proxy.name == first.details["proxy_name"]))
    assert stuck is not None and stuck.failure_count == 1 and stuck.is_active
    async with db.reader() as session:
        trouble = await reports.proxy_trouble(session, utcnow() - timedelta(hours=1))
    assert next((t.name, t.session_failures, t.rotations) for t in trouble) == (stuck.name, 1, 1)
    for mission_id in ids:
        assert await names(db, mission_id) == SEQUENCE


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_failed_job_is_submitted_again(
    db: Database, settings: Settings, fleet: Fleet
) -> None:
    fleet.site.set_ads(per_day=5)
    fleet.workers[0].faults(job="fail", job_times=1)
    await _one_worker(db, settings, fleet)
    [mission_id] = await _create(db, 1, date(2026, 4, 10))
    await run_until_idle(db, settings)
    [m] = await missions(db)
    assert (m.status, m.retry_count, m.ads_count) == ("completed", 1, 5)
    assert await names(db, mission_id) == [
        "mission_queued",
        "mission_assigned",
        "scrape_started",
        "scrape_failed",
        "retry_triggered",
        "scrape_started",
        "scrape_completed",
        "writer_started",
        "writer_completed",
        "mission_completed",
    ]
    retry = [e for e in await events(db, "mission", mission_id) if e.event == "retry_triggered"]
    assert retry[0].details == {"attempt": 1, "error_code": "ERROR200", "phase": "scrape"}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_scrape_retries_run_out_with_error203(
    db: Database, settings: Settings, fleet: Fleet
) -> None:
    fleet.workers[0].faults(job="fail", job_times=10)
    await _one_worker(db, settings, fleet)
    [mission_id] = await _create(db, 1, date(2026, 4, 11))
    await run_until_idle(db, settings)
    [m] = await missions(db)
    assert (m.status, m.error_code, m.retry_count, m.checkpoint) == (
        "failed",
        "ERROR203",
        2,
        "extracao",
    )
    found = await names(db, mission_id)
    assert found.count("scrape_started") == 3 and found[-1] == "mission_failed"
    failed = (await events(db, "mission", mission_id))[-1]
    assert failed.details["error_code"] == "ERROR203" and failed.details["retry_count"] == 2


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_a_partial_writer_job_logs_its_failed_items(
    db: Database, settings: Settings, fleet: Fleet
) -> None:
    fleet.site.set_ads(per_day=10, bad_per_day=2)  # two ids too long for ads.id
    await _one_worker(db, settings, fleet)
    [mission_id] = await _create(db, 1, date(2026, 4, 12))
    await run_until_idle(db, settings)
    [m] = await missions(db)
    assert (m.status, m.ads_count) == ("completed", 10)
    log = {e.event: e.details for e in await events(db, "mission", mission_id)}
    written = log["writer_completed"]
    assert (written["success_count"], written["failed_count"]) == (8, 2)
    assert [i["index"] for i in written["failed_items"]] == sorted(
        i["index"] for i in written["failed_items"]
    )
    assert all("longer than 100" in i["error"] for i in written["failed_items"])
    assert log["mission_completed"]["failed_count"] == 2
    stored = await _ads_stored(fleet, date(2026, 4, 12), date(2026, 4, 12))
    assert stored == 8


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_writer_that_is_down_fails_with_error304_after_one_resubmission(
    db: Database, settings: Settings, fleet: Fleet
) -> None:
    fleet.site.set_ads(per_day=5)
    await _one_worker(db, settings, fleet, writer="http://127.0.0.1:9")  # nothing listens
    [mission_id] = await _create(db, 1, date(2026, 4, 13))
    await run_until_idle(db, settings)
    [m] = await missions(db)
    assert (m.status, m.error_code, m.retry_count, m.checkpoint) == (
        "failed",
        "ERROR304",
        1,
        "armazenamento",
    )
    assert (await names(db, mission_id))[3:] == [
        "scrape_completed",
        "writer_failed",
        "retry_triggered",
        "writer_failed",
        "mission_failed",
    ]
    first = next(e for e in await events(db, "mission", mission_id) if e.event == "writer_failed")
    assert first.details["error_code"] == "ERROR301"


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_a_service_without_a_free_proxy_waits_and_the_loop_goes_on(
    db: Database, settings: Settings, fleet: Fleet
) -> None:
    fleet.site.set_ads(per_day=3)
    await _whole_fleet(db, settings, fleet, fleet.proxies[:1])
    await control.update_settings(db, session_limit=3, max_retries=None)
    await _create(db, 6, date(2026, 4, 20))
    await run_until_idle(db, settings)
    done = await missions(db)
    assert {m.status for m in done} == {"completed"}
    waited = [
        e
        for w in (1, 2)
        for e in await events(db, "worker_service", w)
        if e.event == "session_failed"
    ]
    assert waited and {e.details["error_code"] for e in waited} == {"ERROR501"}
    # One proxy: the two services took turns, never holding it at once.
    turns = []
    for service_id in (1, 2):
        turns += [
            (e.id, e.event)
            for e in await events(db, "worker_service", service_id)
            if e.event in ("session_started", "session_terminated")
        ]
    turns.sort()
    assert len(turns) >= 4  # both held it, one after the other
    for (_, before), (_, after) in itertools.pairwise(turns):
        assert (before, after) != ("session_started", "session_started")


# -- crash recovery (§5.6) and cancel (§5.4) ---------------------------------------------------


async def _mission(db: Database) -> Mission:
    [m] = await missions(db)
    return m


async def _settled(db: Database) -> None:
    async with db.reader() as session:
        held = await session.scalar(
            select(func.count()).select_from(Proxy).where(Proxy.in_use_by_worker_id.is_not(None))
        )
        statuses = set(await session.scalars(select(WorkerService.status)))
    assert held == 0 and statuses == {"idle"}


async def test_an_orchestrator_killed_mid_extraction_and_mid_storage_is_recovered(
    db: Database, settings: Settings, fleet: Fleet, tmp_path: Path
) -> None:
    fleet.site.set_ads(per_day=5)
    # Its job is still running at the kill: long enough for the other mission to reach storage
    # first however loaded the machine is.
    fleet.workers[1].faults(job_delay=8.0)
    await _whole_fleet(db, settings, fleet)
    ids = await _create(db, 2, date(2026, 5, 1))
    # Submitted writer jobs would be polled only after 30 s: the storage is caught in flight.
    first = OrchestratorProcess(
        settings, tmp_path / "orchestrate.log", mission_writer_poll_seconds=30, **SHORT_LEASE
    )

    async def mid_phases() -> bool:
        found = {
            (m.checkpoint, bool(m.worker_job_id), bool(m.writer_job_id)) for m in await missions(db)
        }
        return found == {("extracao", True, False), ("armazenamento", True, True)}

    try:
        await wait_for(mid_phases)
    finally:
        first.kill()  # SIGKILL: no clean-up of any kind
    assert {m.status for m in await missions(db)} == {"running"}
    second = OrchestratorProcess(settings, tmp_path / "orchestrate.log", **SHORT_LEASE)
    try:
        assert await second.exited() == 0, second.log()
    finally:
        second.kill()
    done = await missions(db)
    assert [(m.status, m.ads_count, m.retry_count) for m in done] == [("completed", 5, 0)] * 2
    for mission_id in ids:  # nothing lost, nothing done twice
        assert await names(db, mission_id) == SEQUENCE, second.log()
    await _settled(db)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_a_job_the_service_forgot_while_the_orchestrator_was_down_is_queued_again(
    db: Database, settings: Settings, fleet: Fleet, make_settings: SettingsFactory
) -> None:
    fleet.site.set_ads(per_day=5)
    fleet.workers[0].faults(job="lose", job_times=1)  # as if the service restarted
    await _one_worker(db, settings, fleet)
    [mission_id] = await _create(db, 1, date(2026, 5, 2))
    slow = make_settings(**{**FAST, "mission_job_poll_seconds": 30.0})
    async with running(db, slow) as crashing:

        async def submitted() -> bool:
            return (await _mission(db)).worker_job_id is not None

        await wait_for(submitted)
        assert crashing.current is not None
        crashing.current.abort()  # stops dead, touching nothing, as a crash would
    await run_until_idle(db, settings)
    assert (await _mission(db)).status == "completed"
    assert await names(db, mission_id) == [
        "mission_queued",
        "mission_assigned",
        "scrape_started",
        "mission_queued",
        *SEQUENCE[1:],
    ]
    requeued = [e for e in await events(db, "mission", mission_id) if e.event == "mission_queued"]
    assert requeued[1].details["queued_by"] == "recovery"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_cancel_during_extraction_cancels_the_job_and_frees_the_service(
    db: Database, settings: Settings, fleet: Fleet
) -> None:
    fleet.workers[0].faults(job_delay=60)
    await _one_worker(db, settings, fleet)
    [mission_id] = await _create(db, 1, date(2026, 5, 3))
    async with running(db, settings) as runner:

        async def scraping() -> str | None:
            return (await _mission(db)).worker_job_id

        job_id = await wait_for(scraping)
        box = SecretBox(settings)
        canceled = await admin.cancel(db, settings, box, mission_id, "operator")
        assert canceled.status == "canceled"
        async with httpx.AsyncClient() as http:
            answer = await http.get(
                f"{fleet.workers[0].url}/scrape/{job_id}", headers={"x-api-key": API_KEY}
            )
        assert answer.json()["status"] == "cancelled"
        await wait_for(lambda: _ended(runner))
    assert await names(db, mission_id) == [
        "mission_queued",
        "mission_assigned",
        "scrape_started",
        "mission_canceled",
    ]
    last = (await events(db, "mission", mission_id))[-1]
    assert last.details == {"canceled_by": "operator", "previous_checkpoint": "extracao"}
    m = await _mission(db)
    assert (m.status, m.retry_count, m.finished_at is not None) == ("canceled", 0, True)
    await _settled(db)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_cancel_during_storage_ends_the_mission_without_waiting_for_the_writer(
    db: Database, settings: Settings, fleet: Fleet, make_settings: SettingsFactory
) -> None:
    fleet.site.set_ads(per_day=5)
    slow = make_settings(**{**FAST, "mission_writer_poll_seconds": 30.0})
    await _one_worker(db, slow, fleet)
    [mission_id] = await _create(db, 1, date(2026, 5, 4))
    async with running(db, slow) as runner:

        async def storing() -> str | None:
            return (await _mission(db)).writer_job_id

        await wait_for(storing)
        await admin.cancel(db, slow, SecretBox(slow), mission_id, "operator")
        await wait_for(lambda: _ended(runner))
    assert (await names(db, mission_id))[-2:] == ["writer_started", "mission_canceled"]
    assert (await _mission(db)).status == "canceled"
    await _settled(db)


async def _ended(runner: MissionRunner) -> bool:
    return runner.runs >= 1 and runner.current is None


# -- one loop between processes ----------------------------------------------------------------


async def _leaders(db: Database) -> list[str]:
    async with db.reader() as session:
        rows = await session.scalars(
            select(Event).where(Event.event == "leader_acquired").order_by(Event.id)
        )
        return [str(e.details["leader"]) for e in rows]


async def test_two_runners_on_one_database_run_one_loop(
    db: Database, settings: Settings, fleet: Fleet
) -> None:
    fleet.site.set_ads(per_day=3)
    await _whole_fleet(db, settings, fleet)
    ids = await _create(db, 8, date(2026, 6, 10))
    await control.request_run(db, "test")
    other = Database(settings.resolved_database_url)  # as a second process would connect
    try:
        box = SecretBox(settings)
        runners = [MissionRunner(db, settings, box), MissionRunner(other, settings, box)]
        async with asyncio.timeout(180):
            await asyncio.gather(*(r.run(until_idle=True) for r in runners))
    finally:
        await other.dispose()
    assert sum(r.runs for r in runners) == 1
    assert len(await _leaders(db)) == 1
    for mission_id in ids:
        assert await names(db, mission_id) == SEQUENCE


async def test_when_the_leading_serve_is_killed_the_other_takes_over(
    pg_database: str, fleet: Fleet, tmp_path: Path
) -> None:
    settings = load_settings(
        database_url=pg_database,
        data_dir=tmp_path / "data",
        secret_key=Fernet.generate_key().decode(),
        **FAST,
    )
    db = await open_database(settings)
    serves: list[ServeProcess] = []
    try:
        fleet.site.set_ads(per_day=3)
        for worker in fleet.workers:
            worker.faults(job_delay=0.5)  # the run lasts long enough to kill its leader
        await _whole_fleet(db, settings, fleet)
        ids = await _create(db, 8, date(2026, 6, 20))
        _, key = await create_key(db, "e2e", "admin")
        serves = [
            ServeProcess(settings, tmp_path / f"serve-{n}.log", free_port(), **SHORT_LEASE)
            for n in range(2)
        ]
        await asyncio.gather(*(s.ready() for s in serves))
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
            started = await http.post(f"{serves[1].url}/api/missions/control/start")
            assert started.status_code == 200, started.text

        async def leading() -> ServeProcess | None:
            view = await control.read(db)
            running = [m for m in await missions(db) if m.status == "running"]
            if not (view.leader_id and running):
                return None
            pid = int(view.leader_id.split(":")[1])
            return next(s for s in serves if s.proc.pid == pid)

        leader = await wait_for(leading)
        before_kill = len(await _leaders(db))
        leader.kill()  # SIGKILL, mid-run
        survivor = next(s for s in serves if s is not leader)

        async def finished() -> bool:
            return not (await control.read(db)).run_requested

        await wait_for(finished, timeout=240)
        after_kill = (await _leaders(db))[before_kill:]
        assert after_kill, survivor.log()  # the survivor took the lease over, alone
        assert all(f":{survivor.proc.pid}:" in leader_id for leader_id in after_kill)
        for mission_id in ids:
            found = await names(db, mission_id)
            assert found.count("mission_completed") == 1 and found[-1] == "mission_completed"
        assert {m.status for m in await missions(db)} == {"completed"}
        await _settled(db)
    finally:
        for serve in serves:
            serve.kill()
        await db.dispose()


# -- the dashboard's Mission Control page --------------------------------------------------------


async def test_mission_control_in_a_browser(fleet: Fleet, tmp_path: Path) -> None:
    """SQLite only: the page reads the same API, tested on both engines above."""
    if not CHROMIUM.exists():
        service_missing("Chromium", f"{CHROMIUM} not found")
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=60_000)  # a loaded machine is slow, never wrong

    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ui.db'}",
        data_dir=tmp_path / "data",
        secret_key=Fernet.generate_key().decode(),
        **FAST,
    )
    db = await open_database(settings)
    serve = ServeProcess(settings, tmp_path / "serve.log", free_port())
    try:
        fleet.site.set_ads(per_day=4)
        await _whole_fleet(db, settings, fleet)
        _, key = await create_key(db, "ui", "admin")
        await serve.ready()
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM))
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(60_000)
            await page.goto(serve.url + "/")
            await page.get_by_label("API key").fill(key)
            await page.get_by_role("button", name="Log in").click()
            await (
                page.get_by_role("navigation", name="Main")
                .get_by_role("link", name="Missions")
                .click()
            )
            await expect(page.locator("tr[data-worker='worker-2']")).to_contain_text("idle")
            await page.get_by_label("First day", exact=True).fill("2026-07-01")
            await page.get_by_label("Last day", exact=True).fill("2026-07-03")
            await page.get_by_role("button", name="Create missions").click()
            rows = page.locator("tr[data-mission-id]")
            await expect(rows).to_have_count(3)
            await expect(rows.first).to_contain_text("draft")
            for n in (1, 2):
                await page.get_by_label(f"Select mission {n}").check()
            await page.get_by_role("button", name="Add to queue").click()
            await expect(page.locator("tr[data-mission-id='1']")).to_contain_text("queued")
            await page.get_by_role("button", name="Start").click()
            # Live: the rows turn completed by themselves, no reload.
            for n in (1, 2):
                await expect(page.locator(f"tr[data-mission-id='{n}']")).to_contain_text(
                    "completed", timeout=120_000
                )
            await expect(page.get_by_test_id("orchestrator-state")).to_contain_text("Stopped")
            await page.locator("tr[data-mission-id='1']").get_by_role("link", name="#1").click()
            log = page.get_by_role("region", name="Log of mission 1")
            await expect(log.locator("tr[data-event='mission_completed']")).to_have_count(1)
            steps = log.locator("tr[data-event]:not([data-event$='_progress'])")
            await expect(steps).to_have_count(len(SEQUENCE))
            await shoot(page, "missions")
            # Queue the third (the run is over, nothing takes it) and cancel it.
            await page.get_by_label("Select mission 3").check()
            await page.get_by_role("button", name="Add to queue").click()
            third = page.locator("tr[data-mission-id='3']")
            await expect(third).to_contain_text("queued")
            await third.get_by_role("button", name="Cancel").click()
            await page.locator("#confirm-ok").click()
            await expect(third).to_contain_text("canceled")
            await browser.close()
        assert [m.status for m in await missions(db)] == ["completed", "completed", "canceled"]
    finally:
        serve.kill()
        await db.dispose()


async def shoot(page: Any, name: str) -> None:
    """``docs/screenshots/<name>-<width>.png`` at 1280 and 390 px, as the other pages."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.evaluate("document.getElementById('toasts').replaceChildren()")
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 900})
        await page.wait_for_timeout(150)  # layout settles after the resize
        await page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
    await page.set_viewport_size({"width": 1280, "height": 900})
