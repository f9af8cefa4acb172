"""Monitors over real ``forager worker`` processes (issue 15): two processes on one database
split the monitors between them, never both running one; SIGKILL one and the other takes its
monitors over with their counters and history; SIGTERM gives them back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import func, select

from forager.db.engine import Database
from forager.db.models import Monitor, MonitorSnapshot, ScraperHealthLog, Worker
from forager.monitors import admin
from tests.conftest import SettingsFactory
from tests.support.site import TestSite
from tests.support.waiting import eventually
from tests.support.workers import kill_worker, logs, start_worker, stop_worker

pytestmark = pytest.mark.slow


async def _owners(db: Database) -> dict[int, str | None]:
    async with db.reader() as session:
        return dict((await session.execute(select(Monitor.id, Monitor.lease_owner))).all())


def _pid_of(owner: str | None) -> int | None:
    return int(owner.split(":")[1]) if owner else None


# Processes sharing monitors is a PostgreSQL deployment (in-process: both).
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_two_worker_processes_split_monitors_and_take_over_a_killed_ones(
    make_settings: SettingsFactory,
    db: Database,
    site: TestSite,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {
        "FORAGER_MONITOR_CLAIM_SECONDS": "0.2",
        # Long enough that a process a loaded machine starves for a moment keeps its monitors
        # (a second start would be counted), short enough for the takeover after the kill.
        "FORAGER_MONITOR_LEASE_SECONDS": "6",
        "FORAGER_PARSE_PROCESSES": "1",
    }.items():
        monkeypatch.setenv(name, value)
    settings = make_settings()
    ids = []
    for n in range(4):
        site.set_live(f"w{n}", n)
        spec = admin.MonitorSpec(
            url=site.url(f"/live/w{n}"),
            selector_type="json",
            selectors={"value": "value"},
            interval_seconds=0.2,
            min_interval_seconds=0.2,
            max_interval_seconds=0.5,
        )
        ids.append((await admin.create(db, settings, spec)).id)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs = [start_worker(settings, tmp_path, f"w{n}", 1) for n in range(2)]
        pids = {p.pid for p in procs}

        async def all_running() -> dict[int, str | None] | None:
            owners = await _owners(db)
            async with db.reader() as session:
                polled = await session.scalar(
                    select(func.count()).where(Monitor.total_updates >= 2)
                )
            ok = polled == len(ids) and all(_pid_of(o) in pids for o in owners.values())
            return owners if ok else None

        owners = await eventually(
            all_running, "both processes running the monitors", context=lambda: logs(tmp_path)
        )
        async with db.reader() as session:
            starts = dict(
                (
                    await session.execute(
                        select(ScraperHealthLog.monitor_id, func.count())
                        .where(ScraperHealthLog.event == "start")
                        .group_by(ScraperHealthLog.monitor_id)
                    )
                ).all()
            )
        assert starts == dict.fromkeys(ids, 1)  # each run started once, by one process

        victim = procs[0] if _pid_of(owners[ids[0]]) == procs[0].pid else procs[1]
        survivor = procs[1] if victim is procs[0] else procs[0]
        orphaned = [i for i, o in owners.items() if _pid_of(o) == victim.pid]
        async with db.reader() as session:
            before = dict((await session.execute(select(Monitor.id, Monitor.total_updates))).all())
        kill_worker(victim)

        async def taken_over() -> bool:
            now = await _owners(db)
            return all(_pid_of(now[i]) == survivor.pid for i in ids)

        await eventually(
            taken_over,
            "the survivor taking the killed process's monitors",
            context=lambda: logs(tmp_path),
        )

        async def polled_again() -> bool:
            async with db.reader() as session:
                rows = dict(
                    (await session.execute(select(Monitor.id, Monitor.total_updates))).all()
                )
            return all(rows[i] > before[i] for i in orphaned)

        await eventually(polled_again, "polls after the takeover")
        async with db.reader() as session:
            snapshots = dict(
                (
                    await session.execute(
                        select(MonitorSnapshot.monitor_id, func.count()).group_by(
                            MonitorSnapshot.monitor_id
                        )
                    )
                ).all()
            )
        assert snapshots == dict.fromkeys(ids, 1)  # history intact, no duplicate of the value

        assert stop_worker(survivor) == 0
        assert set((await _owners(db)).values()) == {None}  # a graceful stop gives them back
    finally:
        for proc in procs:
            kill_worker(proc)


# Recycling does not depend on the engine (the takeover test runs on PG).
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_worker_past_its_lifetime_recycles_itself(
    make_settings: SettingsFactory,
    db: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FORAGER_WORKER_MAX_LIFETIME_HOURS", "0.0005")  # 1.8 s
    monkeypatch.setenv("FORAGER_PARSE_PROCESSES", "1")
    settings = make_settings()
    proc = start_worker(settings, tmp_path, "recycling", 1)
    try:

        async def rows() -> list[Worker] | None:
            async with db.reader() as session:
                found = list(
                    await session.scalars(
                        select(Worker)
                        .where(Worker.id.like(f"%:{proc.pid}:worker:%"))
                        .order_by(Worker.started_at)
                    )
                )
            done = [w for w in found if w.recycled and w.stopped_at is not None]
            return found if done and len(found) > len(done) else None

        found = await eventually(
            rows, "a recycled run and its successor", context=lambda: logs(tmp_path)
        )
        first = found[0]
        assert first.recycled and first.stopped_at is not None  # stopped gracefully
        assert (first.memory_bytes or 0) > 0  # it reported its process tree's memory
        assert proc.poll() is None  # the same process slot runs on, afresh
    finally:
        kill_worker(proc)
