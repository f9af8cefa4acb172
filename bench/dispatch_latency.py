"""Dispatch latency: from a submit to the first request at the site, with two idle workers.

Two ``forager worker`` processes on PostgreSQL wait for work; this process submits one URL at a
time (``submit_urls``, as the API does) and reads, from the test site's own request log (a
separate process on loopback), when the request for it arrived. Run once with the workers
LISTENing for NOTIFY and once with ``FORAGER_LISTEN_NOTIFY=false`` (the poll, every
``FORAGER_POLL_SECONDS`` = 1 s by default). Submissions are spaced by a random pause so each one
finds the workers idle, at a random point of their poll.

    FORAGER_BENCH_PG=postgresql://root@127.0.0.1/test .venv/bin/python -m bench.dispatch_latency
    FORAGER_BENCH_DISPATCH_N=200 …   # submissions per mode (default 100)
    FORAGER_BENCH_DISPATCH_MODES=listen …   # only LISTEN/NOTIFY (default: listen,poll)
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text

from bench.pg import pg_admin, scratch_url
from forager.config import load_settings
from forager.db.engine import Database
from forager.db.models import Worker
from forager.queue.door import SubmitSpec, submit_urls
from forager.runtime import open_database
from tests.support.site import SiteProcess

ROOT = Path(__file__).resolve().parents[1]
N = int(os.environ.get("FORAGER_BENCH_DISPATCH_N", "100"))
WORKERS = 2
MODES = os.environ.get("FORAGER_BENCH_DISPATCH_MODES", "listen,poll").split(",")
WARM_UP = 4  # not counted: the domain's first requests (robots.txt, connections)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _ready(db: Database, listen: bool) -> bool:
    async with db.reader() as session:
        alive = await session.scalar(
            select(func.count()).select_from(Worker).where(Worker.stopped_at.is_(None))
        )
        listening = await session.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'LISTEN%'"
            )
        )
    return (alive or 0) >= WORKERS and (not listen or (listening or 0) >= WORKERS)


async def _arrival(site: SiteProcess, path: str, deadline: float) -> float:
    """When the site logged the first request for ``path`` (its ``time.time()``)."""
    while time.monotonic() < deadline:
        hits = [r.start for r in await asyncio.to_thread(site.requests) if r.path == path]
        if hits:
            return min(hits)
        await asyncio.sleep(0.05)  # the site's own clock is read: this only costs CPU
    raise TimeoutError(f"no request for {path}")


async def _measure(db: Database, site: SiteProcess, mode: str, count: int) -> list[float]:
    settings = load_settings(database_url=db.url, default_crawl_delay_seconds=0)
    latencies: list[float] = []
    for n in range(WARM_UP + count):
        await asyncio.sleep(random.uniform(0.1, 0.6))  # idle again, anywhere in the poll
        path = f"/product/{mode}-{n}"
        submitted = time.time()
        await submit_urls(db, settings, [SubmitSpec(site.url(path), created_by="bench")])
        arrived = await _arrival(site, path, time.monotonic() + 30)
        if n >= WARM_UP:
            latencies.append(arrived - submitted)
    return latencies


def _run_mode(site: SiteProcess, tmp: Path, listen: bool) -> dict[str, Any]:
    name = f"forager_dispatch_{os.getpid()}"
    asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    asyncio.run(pg_admin(f'CREATE DATABASE "{name}"'))
    url = scratch_url(name)
    data = tmp / ("listen" if listen else "poll")
    shutil.rmtree(data, ignore_errors=True)
    env = {
        **os.environ,
        "FORAGER_DATABASE_URL": url,
        "FORAGER_DATA_DIR": str(data),
        "FORAGER_DEFAULT_CRAWL_DELAY_SECONDS": "0",
        "FORAGER_LISTEN_NOTIFY": "true" if listen else "false",
        "FORAGER_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    procs: list[subprocess.Popen[bytes]] = []

    async def run() -> list[float]:
        db = await open_database(load_settings(database_url=url, data_dir=data))
        try:
            procs.extend(
                subprocess.Popen(
                    [sys.executable, "-m", "forager.cli", "worker", "--concurrency", "4"],
                    env=env,
                    cwd=tmp,
                    stderr=(tmp / f"worker-{listen}-{i}.log").open("wb"),
                )
                for i in range(WORKERS)
            )
            deadline = time.monotonic() + 60
            while not await _ready(db, listen):
                if time.monotonic() > deadline:
                    raise TimeoutError("the workers did not start")
                await asyncio.sleep(0.1)
            return await _measure(db, site, "listen" if listen else "poll", N)
        finally:
            await db.dispose()

    try:
        latencies = asyncio.run(run())
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    ms = [s * 1000 for s in latencies]
    return {
        "mode": "LISTEN/NOTIFY" if listen else "poll only (FORAGER_LISTEN_NOTIFY=false)",
        "submissions": len(ms),
        "p50_ms": round(_percentile(ms, 0.50), 1),
        "p99_ms": round(_percentile(ms, 0.99), 1),
        "mean_ms": round(statistics.fmean(ms), 1),
        "max_ms": round(max(ms), 1),
    }


def main() -> None:
    try:
        asyncio.run(pg_admin("SELECT 1"))
    except Exception as exc:  # refused, no such role or database
        print(f"dispatch latency skipped: PostgreSQL unreachable ({exc})")
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="forager-dispatch-") as t, SiteProcess() as site:
        for listen in (True, False):
            if ("listen" if listen else "poll") not in MODES:
                continue
            site.reset()
            rows.append(_run_mode(site, Path(t), listen))
    print(f"{'dispatch, 2 idle workers':<44} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for r in rows:
        print(
            f"{r['mode']:<44} {r['submissions']:>4} {r['p50_ms']:>8} {r['p99_ms']:>8} "
            f"{r['max_ms']:>8}"
        )
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "dispatch_latency.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
