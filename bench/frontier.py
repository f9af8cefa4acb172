"""The frontier at scale: discovered links deduplicated and inserted, and claims, with 100 k,
1 M and 10 M tasks in PostgreSQL (issue 32).

One scratch database, grown in steps: the tasks are generated inside PostgreSQL
(``generate_series``, in chunks, every trigger and index of ``crawl_tasks`` live), 100 domains
without crawl delay, 70 % of the tasks completed, 25 % waiting (``pending``), 5 % failed, half
of them a crawl job's. At each size, after ``VACUUM ANALYZE``:

- **discover**: ``PAGES`` pages' links, each page one transaction through ``TaskQueue.discover``
  (``queue/discovered.py``: the job row locked, the links' hashes looked up, the new ones
  inserted, the job's counters moved), ``LINKS`` links a page, half of them new and half
  already known (a random existing task); links/s and new tasks/s;
- **claim**: ``CLAIMS`` calls of ``TaskQueue.claim(limit=64)`` (the worker's claim: candidate
  domains, each locked, its due tasks leased); the tasks claimed are completed between calls,
  untimed, so no domain fills its concurrency; tasks/s and milliseconds per claim.

Both are measured without ``ix_crawl_tasks_domain_due`` (domain, status, priority, schedule, id:
migration 0036) and with it (its build time, and the discover phase's rate, say what it costs
on writes). Which indexes each path read comes from ``pg_stat_user_indexes`` (scans counted
over the phase), with every index's size; the load's rows/s is what all of them cost on
inserts. A size
whose load would take longer than ``FORAGER_BENCH_FRONTIER_MAX_LOAD`` seconds (600), at the
load rate measured so far, is skipped with its estimated load time. Saved to
bench/results/frontier.json.

    .venv/bin/python -m bench.frontier
    FORAGER_BENCH_FRONTIER_SCALES=100000,1000000 .venv/bin/python -m bench.frontier
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.pg import pg_admin, scratch_url
from bench.versus_scrapy import machine, save_results
from forager.config import load_settings
from forager.db.engine import Database
from forager.discovery.jobs import JobSpec, start
from forager.queue.door import Discovery, TaskQueue
from forager.queue.urls import Link, normalize_url
from forager.runtime import open_database

SCALES = [
    int(x)
    for x in os.environ.get("FORAGER_BENCH_FRONTIER_SCALES", "100000,1000000,10000000").split(",")
]
MAX_LOAD_S = float(os.environ.get("FORAGER_BENCH_FRONTIER_MAX_LOAD", "600"))
PAGES = int(os.environ.get("FORAGER_BENCH_FRONTIER_PAGES", "200"))
LINKS = 50
CLAIMS = int(os.environ.get("FORAGER_BENCH_FRONTIER_CLAIMS", "200"))
# Each phase stops early once it has spent this long (at least 3 calls are timed).
PHASE_S = float(os.environ.get("FORAGER_BENCH_FRONTIER_PHASE_S", "30"))
# Sizes above this are measured with the index only (without it a claim takes minutes at 10 M).
WITHOUT_MAX = int(os.environ.get("FORAGER_BENCH_FRONTIER_WITHOUT_MAX", "1000000"))
# The claim's per-domain index (migration 0036), measured without and with it; it is left in
# place for the loads (as migrated).
DOMAIN_INDEX = (
    "CREATE INDEX IF NOT EXISTS ix_crawl_tasks_domain_due ON crawl_tasks"
    " (domain_id, status, priority, scheduled_at, id)"
)
DOMAINS = 100
IDLE = 80  # domains past this one have nothing waiting (every task of theirs completed)
CHUNK = 500_000
_PAGE_IDS = itertools.count()  # every page's new links new in the whole run


def _domain(n: int) -> int:
    return n // 20 % DOMAINS + 1


def _url(n: int) -> str:
    return f"https://shop{_domain(n)}.example/p/{n}"


DOMAINS_SQL = f"""
INSERT INTO domains (domain_name, base_url, parser_name, crawl_delay_seconds,
    max_concurrent_requests, default_crawl_frequency_seconds, is_active, user_agent,
    created_at, updated_at)
SELECT 'shop' || d || '.example', 'https://shop' || d || '.example', 'generic', 0, 64, 86400,
    true, 'bench', now(), now()
FROM generate_series(1, {DOMAINS}) AS d
ON CONFLICT DO NOTHING
"""

# Rows ``:low`` to ``:high``: the URL of ``_url``, its hash as ``normalize_url`` makes it.
FILL_SQL = f"""
INSERT INTO crawl_tasks (domain_id, url, url_hash, status, priority, scheduled_at, retry_count,
    max_retries, is_recurring, crawl_frequency_seconds, recrawl_count, created_by, created_at,
    updated_at, completed_at, job_id, depth, job_action, adaptive_recrawl, unchanged_crawls)
SELECT d.id, s.url, encode(sha256(convert_to(s.url, 'UTF8')), 'hex'),
    CASE WHEN s.n / 20 % {DOMAINS} + 1 > {IDLE} THEN 'completed' WHEN s.n % 20 = 0 THEN 'failed'
        WHEN s.n % 20 <= 5 THEN 'pending' ELSE 'completed' END,
    (s.n % 10) + 1, now() - interval '1 hour', 0, 3, false, 86400, 0, 'bench', now(), now(),
    CASE WHEN s.n % 20 > 5 OR s.n / 20 % {DOMAINS} + 1 > {IDLE} THEN now() END,
    CASE WHEN s.n % 2 = 0 THEN CAST(:job AS bigint) END, CASE WHEN s.n % 2 = 0 THEN 1 END,
    CASE WHEN s.n % 2 = 0 THEN 'parse' END, false, 0
FROM (SELECT n, 'https://shop' || (n / 20 % {DOMAINS} + 1) || '.example/p/' || n AS url
      FROM generate_series(CAST(:low AS bigint), CAST(:high AS bigint)) AS n) AS s
JOIN domains AS d ON d.domain_name = 'shop' || (s.n / 20 % {DOMAINS} + 1) || '.example'
"""

INDEXES_SQL = """
SELECT indexrelname AS name, idx_scan AS scans, pg_relation_size(indexrelid) AS bytes
FROM pg_stat_user_indexes WHERE relname = 'crawl_tasks' ORDER BY indexrelname
"""


async def _indexes(db: Database) -> dict[str, dict[str, int]]:
    await db.dispose()  # closed connections flush their statistics
    await asyncio.sleep(0.5)
    async with db.engine.connect() as conn:
        rows = (await conn.execute(text(INDEXES_SQL))).mappings()
        return {r["name"]: {"scans": int(r["scans"]), "bytes": int(r["bytes"])} for r in rows}


def _used(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, int]:
    return {
        name: after[name]["scans"] - before.get(name, {"scans": 0})["scans"]
        for name in after
        if after[name]["scans"] > before.get(name, {"scans": 0})["scans"]
    }


async def load(db: Database, job_id: int, low: int, high: int) -> float:
    """Rows ``low`` … ``high - 1`` written (chunked), then VACUUM ANALYZE; returns seconds."""
    started = time.perf_counter()
    for first in range(low, high, CHUNK):
        last = min(first + CHUNK, high) - 1
        async with db.engine.begin() as conn:
            await conn.execute(text(FILL_SQL), {"job": job_id, "low": first, "high": last})
        print(f"loaded {last + 1:,} tasks", file=sys.stderr)
    async with db.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE crawl_tasks"))
    return time.perf_counter() - started


async def measure_discover(
    queue: TaskQueue, job_id: int, found_on: int, size: int, rng: random.Random
) -> dict[str, Any]:
    times: list[float] = []
    queued = seen = 0
    for page in range(PAGES):
        if page >= 3 and sum(times) > PHASE_S:
            break
        new = [f"https://shop{k % IDLE + 1}.example/n/{next(_PAGE_IDS)}/{k}" for k in range(25)]
        known = [_url(rng.randrange(size)) for _ in range(LINKS - len(new))]
        links = [Link(normalize_url(u), "parse") for u in new + known]
        started = time.perf_counter()
        async with queue.db.session() as session:
            tallies = await queue.discover(session, [Discovery(job_id, found_on, 1, links)])
        times.append(time.perf_counter() - started)
        queued += len(tallies[job_id].queued)
        seen += len(links)
    total = sum(times)
    return {
        "pages": len(times),
        "links": seen,
        "queued": queued,
        "links_per_s": round(seen / total),
        "new_tasks_per_s": round(queued / total),
        "ms_per_page_p50": round(statistics.median(times) * 1000, 2),
    }


async def measure_claim(queue: TaskQueue) -> dict[str, Any]:
    times: list[float] = []
    claimed = 0
    for n in range(CLAIMS):
        if n >= 3 and sum(times) > PHASE_S:
            break
        started = time.perf_counter()
        tasks = await queue.claim("bench-frontier", 64)
        times.append(time.perf_counter() - started)
        claimed += len(tasks)
        async with queue.db.engine.begin() as conn:  # done, untimed: no domain fills up
            await conn.execute(
                text(
                    "UPDATE crawl_tasks SET status = 'completed', lease_owner = NULL,"
                    " lease_expires_at = NULL, completed_at = now() WHERE id = ANY(:ids)"
                ),
                {"ids": [t.id for t in tasks]},
            )
    total = sum(times)
    return {
        "claims": len(times),
        "tasks": claimed,
        "tasks_per_s": round(claimed / total),
        "ms_per_claim_p50": round(statistics.median(times) * 1000, 2),
    }


async def phase(
    db: Database, queue: TaskQueue, job_id: int, found_on: int, size: int, rng: random.Random
) -> dict[str, Any]:
    """Discover, then claim; with the indexes each scanned and every index's size after."""
    before = await _indexes(db)
    found = await measure_discover(queue, job_id, found_on, size, rng)
    middle = await _indexes(db)
    claimed = await measure_claim(queue)
    after = await _indexes(db)
    found["indexes_scanned"] = _used(before, middle)
    claimed["indexes_scanned"] = _used(middle, after)
    return {
        "discover": found,
        "claim": claimed,
        "index_mb": {name: round(v["bytes"] / 2**20, 1) for name, v in after.items()},
    }


async def run(database_url: str, data_dir: Path) -> dict[str, Any]:
    settings = load_settings(data_dir=data_dir, database_url=database_url, log_level="WARNING")
    db = await open_database(settings)
    queue = TaskQueue(db, settings)
    check = normalize_url(_url(7))
    assert check.url == _url(7), "the bench's URLs must be normalized already"
    async with db.engine.begin() as conn:
        await conn.execute(text(DOMAINS_SQL))
    job = await start(
        db,
        settings,
        JobSpec(
            name="frontier",
            start_urls=("https://shop1.example/",),
            rules=({"action": "parse", "pattern": "/p/"},),
            max_pages=10_000_000,
            created_by="bench",
        ),
    )
    async with db.engine.connect() as conn:
        found_on = int((await conn.execute(text("SELECT min(id) FROM crawl_tasks"))).scalar_one())
    rng = random.Random(32)
    results: dict[str, Any] = {"scales": {}}
    loaded = 0
    rate = 0.0  # rows/s of the load so far
    for size in SCALES:
        if rate and (size - loaded) / rate > MAX_LOAD_S:
            results["scales"][str(size)] = {
                "skipped": f"load estimated at {(size - loaded) / rate:.0f} s "
                f"({size - loaded:,} rows at {rate:,.0f} rows/s) > {MAX_LOAD_S:.0f} s"
            }
            print(f"{size:,}: {results['scales'][str(size)]['skipped']}", file=sys.stderr)
            continue
        seconds = await load(db, job.id, loaded, size)
        rate = (size - loaded) / seconds
        row: dict[str, Any] = {
            "load_s": round(seconds, 1),
            "load_rows_per_s": round(rate),
        }
        loaded = size
        if size <= WITHOUT_MAX:
            async with db.engine.begin() as conn:
                await conn.execute(text("DROP INDEX IF EXISTS ix_crawl_tasks_domain_due"))
                await conn.execute(text("ANALYZE crawl_tasks"))
            row["without_domain_index"] = await phase(db, queue, job.id, found_on, size, rng)
        started = time.perf_counter()
        async with db.engine.begin() as conn:
            await conn.execute(text(DOMAIN_INDEX))
            await conn.execute(text("ANALYZE crawl_tasks"))
        row["domain_index_build_s"] = round(time.perf_counter() - started, 1)
        row["with_domain_index"] = await phase(db, queue, job.id, found_on, size, rng)
        async with db.engine.connect() as conn:
            row["table_mb"] = round(
                int((await conn.execute(text("SELECT pg_table_size('crawl_tasks')"))).scalar_one())
                / 2**20,
                1,
            )
        results["scales"][str(size)] = row
        print(f"{size:,}: {json.dumps(row)}", file=sys.stderr)
        save(results)
    await db.dispose()
    return results


def save(results: dict[str, Any]) -> None:
    save_results("frontier", results, "FORAGER_BENCH_FRONTIER_OUT")


def table(results: dict[str, Any]) -> str:
    lines = [
        "| tasks | load | discover links/s | new tasks/s | ms per page | claim tasks/s |"
        " ms per claim |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, row in results["scales"].items():
        if "skipped" in row:
            lines.append(f"| {int(size):,} | skipped: {row['skipped']} |")
            continue
        for label in ("without_domain_index", "with_domain_index"):
            if label not in row:
                continue
            d, c = row[label]["discover"], row[label]["claim"]
            lines.append(
                f"| {int(size):,} {label} | {row['load_s']} s | {d['links_per_s']} | "
                f"{d['new_tasks_per_s']} | {d['ms_per_page_p50']} | {c['tasks_per_s']} | "
                f"{c['ms_per_claim_p50']} |"
            )
    return "\n".join(lines)


def main() -> None:
    name = f"forager_frontier_{os.getpid()}"
    asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    asyncio.run(pg_admin(f'CREATE DATABASE "{name}"'))
    machine_before = machine()
    try:
        with tempfile.TemporaryDirectory(prefix="forager-frontier-") as tmp:
            results = asyncio.run(run(scratch_url(name), Path(tmp)))
    finally:
        asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    results = {"machine_before": machine_before, **results, "machine_after": machine()}
    save(results)
    print(table(results))


if __name__ == "__main__":
    main()
