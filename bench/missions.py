"""Missions bench: missions per minute with 1, 2 and 4 reference worker services, and what
the orchestrator costs per mission (database statements, CPU).

Everything runs for real on loopback: the test site's ad library in its own process (200 ads a
day, 8 pages of 25), the proxies in another, each reference worker service and the reference
writer in their own. The orchestrator runs in this process, so its CPU time
(``time.process_time``) and its statements (counted on its engines) are its own. Each mission
is one day: the scrape pages through the 200 ads via a proxy, the writer upserts them.

Clocks are set to 50 ms (``FAST`` below) so the figures show what the loop can do; with the
seed's own intervals (job polled every 30 s) a mission takes at least one poll period.

    python -m bench.missions              # SQLite and PostgreSQL, FORAGER_BENCH_MISSIONS=24
    python -m bench.missions sqlite
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet
from sqlalchemy import event, func, select

from bench.pg import scratch_database
from forager.config import Settings, load_settings
from forager.db.engine import Database
from forager.db.models import Ad, Mission
from forager.missions import admin
from forager.runtime import open_database
from tests.missions.fleet import (
    ServiceProcess,
    register,
    run_until_idle,
    start_all,
    worker_service,
    writer_service,
)
from tests.support.site import SiteProcess

ROOT = Path(__file__).resolve().parents[1]
MISSIONS = int(os.environ.get("FORAGER_BENCH_MISSIONS", "24"))
ADS_PER_MISSION = 200
WORKER_COUNTS = (1, 2, 4)
PROXIES = 6
FAST = {
    "mission_loop_seconds": 0.05,
    "mission_session_poll_seconds": 0.05,
    "mission_job_poll_seconds": 0.05,
    "mission_writer_poll_seconds": 0.05,
    "mission_leader_lease_seconds": 15.0,
    "log_level": "WARNING",
}


def _proxies_process() -> tuple[subprocess.Popen[str], list[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.missions", "proxies", str(PROXIES)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ports = [int(p) for p in proc.stdout.readline().split()]
    return proc, ports


class _Proxy:
    """What ``register`` needs of a proxy that runs in the proxies process."""

    def __init__(self, port: int) -> None:
        self.port, self.username, self.password = port, None, None


class Statements:
    """Counts the statements this process sends on ``db``'s engines, and the writes among them
    (state changes and events: what a mission costs whatever the polling cadence)."""

    def __init__(self, db: Database) -> None:
        self.count = 0
        self.writes = 0
        for engine in {db.engine, db.read_engine}:
            event.listen(engine.sync_engine, "before_cursor_execute", self._one)

    def _one(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.count += 1
        if statement.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE"):
            self.writes += 1


async def _round(
    settings: Settings, site: SiteProcess, ports: list[int], workers: int, tmp: Path
) -> dict[str, Any]:
    db = await open_database(settings)
    services: list[ServiceProcess] = [worker_service(site.url()) for _ in range(workers)]
    writer = writer_service(settings.resolved_database_url)
    try:
        start_all(*services, writer)
        await register(
            db,
            settings,
            workers=[s.url for s in services],
            writers=[writer.url],
            proxies=[_Proxy(p) for p in ports],
        )  # type: ignore[misc]
        first = date(2026, 1, 1) + timedelta(days=workers * 40)
        spec = admin.MissionSpec(
            first,
            first + timedelta(days=MISSIONS - 1),
            "all",
            ("pt", "en", "es"),
            split_by_day=True,
        )
        await admin.create(db, spec, queue=True, by="bench", max_span_days=MISSIONS)
        statements = Statements(db)
        cpu, wall = time.process_time(), time.perf_counter()
        await run_until_idle(db, settings, timeout=1800)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        async with db.reader() as session:
            done = await session.scalar(
                select(func.count()).where(Mission.status == "completed")  # type: ignore[arg-type]
            )
            ads = await session.scalar(select(func.count()).select_from(Ad))
        assert done == MISSIONS, done
        assert ads == MISSIONS * ADS_PER_MISSION, ads
        return {
            "worker_services": workers,
            "missions": MISSIONS,
            "ads": ads,
            "seconds": round(wall, 2),
            "missions_per_min": round(MISSIONS * 60 / wall, 1),
            "orchestrator_statements_per_mission": round(statements.count / MISSIONS, 1),
            "orchestrator_writes_per_mission": round(statements.writes / MISSIONS, 1),
            "orchestrator_cpu_ms_per_mission": round(cpu * 1000 / MISSIONS, 1),
        }
    finally:
        for service in (*services, writer):
            service.stop()
        await db.dispose()


def _settings(url: str, tmp: Path) -> Settings:
    return load_settings(
        database_url=url,
        data_dir=tmp / "data",
        secret_key=Fernet.generate_key().decode(),
        **FAST,
    )


def main(engines: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {"load_before": os.getloadavg()}
    proxies, ports = _proxies_process()
    try:
        with SiteProcess(["127.0.0.1"]) as site, tempfile.TemporaryDirectory() as tmp_name:
            site.set_ads(per_day=ADS_PER_MISSION)
            tmp = Path(tmp_name)
            for engine in engines:
                rounds = []
                for n in WORKER_COUNTS:
                    if engine == "sqlite":
                        url = f"sqlite+aiosqlite:///{tmp / f'missions-{n}.db'}"
                        rounds.append(asyncio.run(_round(_settings(url, tmp), site, ports, n, tmp)))
                    else:
                        with scratch_database(f"forager_bench_missions_{n}") as url:
                            rounds.append(
                                asyncio.run(_round(_settings(url, tmp), site, ports, n, tmp))
                            )
                    print(json.dumps({engine: rounds[-1]}), flush=True)
                results[engine] = rounds
    finally:
        proxies.send_signal(signal.SIGTERM)
        proxies.wait(timeout=30)
    results["load_after"] = os.getloadavg()
    return results


def serve_proxies(count: int) -> None:
    """The proxies, in their own process: print their ports, serve until SIGTERM."""
    from tests.support.proxy import TestProxy

    started = [TestProxy() for _ in range(count)]
    for proxy in started:
        proxy.start()
    print(" ".join(str(p.port) for p in started), flush=True)
    signal.sigwait({signal.SIGTERM})
    for proxy in started:
        proxy.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["proxies"]:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        serve_proxies(int(sys.argv[2]))
    else:
        engines = sys.argv[1:] or ["sqlite", "postgresql"]
        out = main(engines)
        print(json.dumps(out, indent=2))
        results = ROOT / "bench" / "results"
        results.mkdir(exist_ok=True)
        (results / "missions.json").write_text(json.dumps(out, indent=2) + "\n")
