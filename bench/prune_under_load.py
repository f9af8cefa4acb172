"""Row retention under load: prune a database of 1,000,000 events while workers write, and the
API's latency meanwhile, both engines.

The events (90 % of them past the 90-day retention, spread over 10,000 finished tasks) are
generated inside the database; then three things run at once: ``forager.retention.prune`` and
WRITERS writer loops (each committing a group of 20 events and 20 attempts per transaction, as
a worker's group commit does) in this process, and API clients calling a few endpoints of a
``forager serve`` in its own process over HTTP, from a third process. (Clients, writers and
prune on one event loop, as this bench first ran, time the loop's queue as much as the API:
``FORAGER_BENCH_API=inprocess`` still runs it that way, through ASGI, for comparison.) The
API's p50/p95 before and during the prune, overall and per endpoint, the prune's duration and
rows, and the writers' commits and p95 commit time are printed as JSON.
``python -m bench.prune_under_load [sqlite|postgresql]`` (``FORAGER_BENCH_EVENTS`` sets the
size).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
from sqlalchemy import insert, text

from bench.pg import scratch_database
from forager.apikeys import create_key
from forager.app import create_app
from forager.config import load_settings
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, Event
from forager.db.types import utcnow
from forager.retention.prune import prune

EVENTS = int(os.environ.get("FORAGER_BENCH_EVENTS", "1000000"))
TASKS = 10_000
WRITERS = 2
BASELINE_SECONDS = 5.0
IN_PROCESS = os.environ.get("FORAGER_BENCH_API", "serve") == "inprocess"
T = TypeVar("T")
ENDPOINTS = ["/api/tasks?limit=50", "/api/events?limit=50", "/api/tasks/4242", "/health"]


def _fill_sql(dialect: str) -> list[str]:
    old = "datetime('now', '-200 days')" if dialect == "sqlite" else "now() - interval '200 days'"
    now = "CURRENT_TIMESTAMP"
    seq = "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {N})"
    pad = "printf('%064d', n)" if dialect == "sqlite" else "lpad(n::text, 64, '0')"
    return [
        "INSERT INTO domains (domain_name, base_url, parser_name, crawl_delay_seconds,"
        " max_concurrent_requests, default_crawl_frequency_seconds, is_active, user_agent,"
        f" created_at, updated_at) VALUES ('shop.example', 'https://shop.example', 'generic', 1,"
        f" 5, 86400, true, 'bench', {now}, {now})",
        seq.format(N=TASKS)
        + " INSERT INTO crawl_tasks (domain_id, url, url_hash, status, priority, scheduled_at,"
        " retry_count, max_retries, is_recurring, crawl_frequency_seconds, recrawl_count,"
        " created_by, created_at, updated_at)"
        f" SELECT 1, 'https://shop.example/p/' || n, {pad}, 'completed', 5, {now}, 0, 3, false,"
        f" 86400, 0, 'bench', {now}, {now} FROM seq",
        seq.format(N=EVENTS)
        + " INSERT INTO events (entity_type, entity_id, event, details, created_at)"
        f" SELECT 'task', CAST((n % {TASKS}) + 1 AS TEXT), 'status_changed', NULL,"
        f" CASE WHEN n % 10 = 0 THEN {now} ELSE {old} END FROM seq",
    ]


def _quantiles(times: list[float]) -> dict[str, float]:
    if not times:
        return {"n": 0}
    times = sorted(times)
    return {
        "n": len(times),
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, round(0.95 * len(times)) - 1)], 1),
        "max_ms": round(times[-1], 1),
    }


def _per_endpoint(times: dict[str, list[float]]) -> dict[str, Any]:
    every = [t for ts in times.values() for t in ts]
    return {"all": _quantiles(every), **{path: _quantiles(ts) for path, ts in times.items()}}


async def _api_load(client: httpx.AsyncClient, stopped: Any, times: dict[str, list[float]]) -> None:
    """Call the endpoints in turn until ``stopped()``, timing each call."""
    n = 0
    while not stopped():
        path = ENDPOINTS[n % len(ENDPOINTS)]
        started = time.perf_counter()
        response = await client.get(path)
        response.raise_for_status()
        times.setdefault(path, []).append((time.perf_counter() - started) * 1000)
        n += 1
        await asyncio.sleep(0.01)


def _client_process(base_url: str, key: str, stop: Any, out: Any) -> None:
    """The API clients in a process of their own (their loop waits for nothing else)."""

    async def go() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {}
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120) as client:
            for path in ENDPOINTS:  # warm: the server's first calls open its connections
                (await client.get(path)).raise_for_status()
            out.put("ready")  # imported (spawn imports this module anew) and warm
            await _api_load(client, stop.is_set, times)
        return times

    out.put(asyncio.run(go()))


class _Clients:
    """One phase of API load from another process: ``start()``, then ``stop()`` → times."""

    def __init__(self, base_url: str, key: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._out = ctx.Queue()
        self._process = ctx.Process(
            target=_client_process, args=(base_url, key, self._stop, self._out)
        )

    def start(self) -> None:
        self._process.start()
        assert self._out.get(timeout=120) == "ready"

    def stop(self) -> dict[str, list[float]]:
        self._stop.set()
        times: dict[str, list[float]] = self._out.get(timeout=120)
        self._process.join(timeout=30)
        return times


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _serve(
    database_url: str, data_dir: Path, key: str
) -> tuple[subprocess.Popen[bytes], str]:
    """``forager serve`` (no built-in workers) in its own process, once it answers."""
    port = _free_port()
    env = {
        **os.environ,
        "FORAGER_DATABASE_URL": database_url,
        "FORAGER_DATA_DIR": str(data_dir),
        "FORAGER_SERVE_WORKERS": "0",
        "FORAGER_LOG_LEVEL": "WARNING",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "forager.cli", "serve", "--port", str(port)],
        env=env,
        cwd=data_dir,
        stdout=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=base_url) as client:
        for _ in range(600):
            try:
                if (await client.get("/health")).status_code < 500:
                    return server, base_url
            except httpx.TransportError:
                pass
            if server.poll() is not None:
                raise RuntimeError("forager serve exited")
            await asyncio.sleep(0.1)
    server.terminate()
    raise RuntimeError("forager serve did not answer in 60 s")


async def _writer(db: Database, stop: asyncio.Event, times: list[float], n: int) -> None:
    task_id = n + 1
    while not stop.is_set():
        now = utcnow()
        started = time.perf_counter()
        async with db.session() as session:
            await session.execute(
                insert(Event),
                [
                    {
                        "entity_type": "task",
                        "entity_id": str(task_id),
                        "event": "x",
                        "created_at": now,
                    }
                    for _ in range(20)
                ],
            )
            await session.execute(
                insert(CrawlAttempt),
                [
                    {"task_id": task_id, "outcome": "success", "phase": "fetch", "started_at": now}
                    for _ in range(20)
                ],
            )
        times.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.03)  # the group writer's interval


Phases = Any  # an async context manager factory: API load for the length of one phase


def _in_process_phases(app: Any, key: str) -> Phases:
    @asynccontextmanager
    async def phase() -> AsyncIterator[dict[str, list[float]]]:
        times: dict[str, list[float]] = {}
        stop = asyncio.Event()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://bench",
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        ) as client:
            load = asyncio.create_task(_api_load(client, stop.is_set, times))
            try:
                yield times
            finally:
                stop.set()
                await load

    return phase


def _serve_phases(base_url: str, key: str) -> Phases:
    @asynccontextmanager
    async def phase() -> AsyncIterator[dict[str, list[float]]]:
        times: dict[str, list[float]] = {}
        clients = _Clients(base_url, key)
        await asyncio.to_thread(clients.start)
        try:
            yield times
        finally:
            times.update(await asyncio.to_thread(clients.stop))

    return phase


async def _phase(
    db: Database, phases: Phases, work: Awaitable[T]
) -> tuple[dict[str, list[float]], list[float], T]:
    """API load and the writers while ``work`` runs: the API's times, the commits', its result."""
    stop = asyncio.Event()
    written: list[float] = []
    async with phases() as times:
        writers = [asyncio.create_task(_writer(db, stop, written, n)) for n in range(WRITERS)]
        try:
            result = await work
        finally:
            stop.set()
            await asyncio.gather(*writers)
    return times, written, result


async def run(database_url: str, data_dir: Path) -> dict[str, Any]:
    settings = load_settings(
        data_dir=data_dir, database_url=database_url, serve_workers=0, log_level="WARNING"
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        db: Database = app.state.runtime.db
        started = time.perf_counter()
        async with db.engine.begin() as conn:
            for statement in _fill_sql(db.dialect):
                await conn.execute(text(statement))
            if db.dialect == "sqlite":
                await conn.execute(text("ANALYZE"))
        if db.dialect == "postgresql":
            async with db.engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(text("VACUUM ANALYZE"))
        fill_seconds = round(time.perf_counter() - started, 1)
        _, key = await create_key(db, "bench", "read")
        if IN_PROCESS:
            phases = _in_process_phases(app, key)
            server = None
        else:
            server, base_url = await _serve(database_url, data_dir, key)
            phases = _serve_phases(base_url, key)
        try:
            baseline, written, _ = await _phase(db, phases, asyncio.sleep(BASELINE_SECONDS))
            started = time.perf_counter()
            during, written_during, pruned = await _phase(db, phases, prune(db, settings))
            prune_seconds = round(time.perf_counter() - started, 1)
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
    return {
        "events": EVENTS,
        "fill_seconds": fill_seconds,
        "prune_seconds": prune_seconds,
        "pruned_rows": pruned.rows,
        "api": "in this process (ASGI)" if IN_PROCESS else "forager serve, its own process",
        "api_before": _per_endpoint(baseline),
        "api_during_prune": _per_endpoint(during),
        "writer_commits_before": _quantiles(written),
        "writer_commits_during_prune": _quantiles(written_during),
        "load_average": os.getloadavg(),
    }


def main() -> None:
    engines = sys.argv[1:] or ["sqlite", "postgresql"]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="forager-prune-bench-") as tmp:
        if "sqlite" in engines:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
            out["sqlite"] = asyncio.run(run(url, Path(tmp)))
        if "postgresql" in engines:
            with scratch_database("forager_bench_prune") as url:
                out["postgresql"] = asyncio.run(run(url, Path(tmp)))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
