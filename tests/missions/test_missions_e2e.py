"""End to end: real worker-service and writer processes, proxies and the ad library on
loopback, the orchestrator in this process; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta

import pytest
from sqlalchemy import func, select

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Ad, Proxy, WorkerService
from forager.missions import admin, control
from tests.missions.conftest import Fleet
from tests.missions.fleet import (
    events,
    missions,
    names,
    register,
    run_until_idle,
    start_all,
    writer_service,
)

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


async def test_twenty_missions_complete_with_the_seed_event_sequence(
    db: Database, settings: Settings, fleet: Fleet, db_url: str
) -> None:
    # The writer writes Forager's own database here (the other tests use its own SQLite file).
    writer = writer_service(db_url)
    start_all(writer)
    try:
        fleet.site.set_ads(per_day=30)
        await register(
            db,
            settings,
            workers=[w.url for w in fleet.workers],
            writers=[writer.url],
            proxies=fleet.proxies,
        )
        ids = await _create(db, 20)
        runner = await run_until_idle(db, settings, timeout=120)
    finally:
        writer.stop()
    assert runner.runs == 1
    done = await missions(db)
    assert [(m.status, m.checkpoint, m.ads_count, m.retry_count) for m in done] == [
        ("completed", "finalizado", 30, 0)
    ] * 20
    for mission_id in ids:
        assert await names(db, mission_id) == SEQUENCE, mission_id
        everything = await names(db, mission_id, progress=True)
        scraping = everything[everything.index("scrape_started") : everything.index(
            "scrape_completed")]
        assert set(scraping[1:]) <= {"scrape_progress"}
        writing = everything[everything.index("writer_started") : everything.index(
            "writer_completed")]
        assert set(writing[1:]) <= {"writer_progress"}
    async with db.reader() as session:
        stored = await session.scalar(select(func.count()).select_from(Ad))
        held = await session.scalar(
            select(func.count()).select_from(Proxy).where(Proxy.in_use_by_worker_id.is_not(None))
        )
        services = list(await session.scalars(select(WorkerService)))
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
        log = [e for e in await events(db, "worker_service", service.id)]
        started = [e.details["proxy_name"] for e in log if e.event == "session_started"]
        ready = [e for e in log if e.event == "session_ready"]
        assert len(started) == len(ready) >= -(-assigned[str(service.id)] // 5)
        assert all(a != b for a, b in zip(started, started[1:], strict=False))
        assert log[-1].event == "session_terminated"
    # The scrapes really went through the sessions' proxies to the ad library.
    assert sum(1 for p in fleet.proxies for r in p.requests if "/ads?" in r) >= 40
