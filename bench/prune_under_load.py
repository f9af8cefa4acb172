"""Row retention under load: prune a database of 1,000,000 events while workers write, and the
API's latency meanwhile, both engines.

The events (90 % of them past the 90-day retention, spread over 10,000 finished tasks) are
generated inside the database; then, in one process as under ``forager serve`` (whose
scheduler prunes), three things run at once: ``forager.retention.prune``; WRITERS writer loops,
each committing a group of 20 events and 20 attempts per transaction, as a worker's group
commit does; and API clients calling a few endpoints through the real app. The API's p50/p95
before and during the prune, the prune's duration and rows, and the writers' commits and p95
commit time are printed as JSON. ``python -m bench.prune_under_load [sqlite|postgresql]``
(``FORAGER_BENCH_EVENTS`` sets the size).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


async def _api_load(client: httpx.AsyncClient, stop: asyncio.Event, times: list[float]) -> None:
    n = 0
    while not stop.is_set():
        started = time.perf_counter()
        response = await client.get(ENDPOINTS[n % len(ENDPOINTS)])
        response.raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
        n += 1
        await asyncio.sleep(0.01)


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
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://bench",
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        ) as client:
            stop = asyncio.Event()
            baseline: list[float] = []
            written: list[float] = []
            load = [asyncio.create_task(_api_load(client, stop, baseline))]
            load += [asyncio.create_task(_writer(db, stop, written, n)) for n in range(WRITERS)]
            await asyncio.sleep(BASELINE_SECONDS)
            stop.set()
            await asyncio.gather(*load)

            stop = asyncio.Event()
            during: list[float] = []
            written_during: list[float] = []
            load = [asyncio.create_task(_api_load(client, stop, during))]
            load += [
                asyncio.create_task(_writer(db, stop, written_during, n)) for n in range(WRITERS)
            ]
            started = time.perf_counter()
            pruned = await prune(db, settings)
            prune_seconds = round(time.perf_counter() - started, 1)
            stop.set()
            await asyncio.gather(*load)
    return {
        "events": EVENTS,
        "fill_seconds": fill_seconds,
        "prune_seconds": prune_seconds,
        "pruned_rows": pruned.rows,
        "api_before": _quantiles(baseline),
        "api_during_prune": _quantiles(during),
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
