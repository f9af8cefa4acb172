"""What the task-counter and URL-trigram triggers (migration 0010) cost each task on writes.

A task's life as the queue writes it, one statement at a time: one insert, then six status
moves (queued, crawling, downloaded, queued_parse, parsing, completed: one single-row UPDATE
each), and the same again as one set-based UPDATE per step over a batch of 100 tasks. All in
one transaction, so commits (fsync) do not drown the statements. Run on a fresh database with
the triggers and on one without them (they are dropped); the difference per task is the
triggers' cost. Wall time on a client in the same machine, so database CPU is included.
``python -m bench.counter_cost [sqlite|postgresql]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from bench.pg import scratch_database
from forager.config import load_settings
from forager.db.engine import Database
from forager.runtime import open_database

TASKS = int(os.environ.get("FORAGER_BENCH_COUNTER_TASKS", "2000"))
BATCH = 100
STEPS = ("queued", "crawling", "downloaded", "queued_parse", "parsing", "completed")
TRIGGERS = ("task_counts_insert", "task_counts_delete", "task_counts_update", "task_urls_update")


async def _drop_triggers(db: Database) -> None:
    async with db.engine.begin() as conn:
        for name in TRIGGERS:
            on = "" if db.dialect == "sqlite" else " ON crawl_tasks"
            await conn.execute(text(f"DROP TRIGGER IF EXISTS {name}{on}"))


async def _insert(session: AsyncSession, first: int, count: int) -> None:
    await session.execute(
        text(
            "INSERT INTO crawl_tasks (domain_id, url, url_hash, status, priority,"
            " scheduled_at, retry_count, max_retries, is_recurring, crawl_frequency_seconds,"
            " recrawl_count, created_by, created_at, updated_at) VALUES (1, :url, :hash,"
            " 'pending', 5, CURRENT_TIMESTAMP, 0, 3, false, 86400, 0, 'bench',"
            " CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
        ),
        [
            {"url": f"https://shop.example/p/{n}?ref=bench", "hash": f"{n:064d}"}
            for n in range(first, first + count)
        ],
    )


async def _move(session: AsyncSession, where: str, params: dict[str, Any]) -> None:
    for step in STEPS:
        timing = ", started_at = CURRENT_TIMESTAMP" if step == "crawling" else ""
        timing += ", completed_at = CURRENT_TIMESTAMP" if step == "completed" else ""
        await session.execute(
            text(
                f"UPDATE crawl_tasks SET status = :s, updated_at = CURRENT_TIMESTAMP{timing}"
                f" WHERE {where}"
            ),
            {"s": step, **params},
        )


async def _per_task_ms(url: str, data_dir: Path, triggers: bool) -> dict[str, float]:
    db = await open_database(load_settings(database_url=url, data_dir=data_dir))
    try:
        if not triggers:
            await _drop_triggers(db)
        async with db.session() as session:
            await session.execute(
                text(
                    "INSERT INTO domains (domain_name, base_url, parser_name,"
                    " crawl_delay_seconds, max_concurrent_requests,"
                    " default_crawl_frequency_seconds, is_active, user_agent, created_at,"
                    " updated_at) VALUES ('shop.example', 'https://shop.example', 'generic', 1,"
                    " 5, 86400, true, 'bench', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                )
            )
        async with db.session() as session:
            started = time.perf_counter()
            for n in range(TASKS):  # one by one, as single submissions and the queue do now
                await _insert(session, n, 1)
                await _move(session, "id = :id", {"id": n + 1})
            single = (time.perf_counter() - started) * 1000 / TASKS
            started = time.perf_counter()
            for first in range(TASKS, 2 * TASKS, BATCH):  # set-based, as batched writers do
                await _insert(session, first, BATCH)
                where = "id > :lo AND id <= :hi"
                await _move(session, where, {"lo": first, "hi": first + BATCH})
            batched = (time.perf_counter() - started) * 1000 / TASKS
        return {"single_ms_per_task": round(single, 3), "batched_ms_per_task": round(batched, 3)}
    finally:
        await db.dispose()


def _engine(engine: str, tmp: Path, triggers: bool) -> dict[str, float]:
    if engine == "sqlite":
        path = tmp / f"counter-{triggers}.db"
        return asyncio.run(_per_task_ms(f"sqlite+aiosqlite:///{path}", tmp, triggers))
    with scratch_database(f"forager_bench_counters_{int(triggers)}") as url:
        return asyncio.run(_per_task_ms(url, tmp, triggers))


def main() -> None:
    out: dict[str, Any] = {"tasks": TASKS, "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="forager-counter-bench-") as tmp:
        for engine in sys.argv[1:] or ["sqlite", "postgresql"]:
            out[engine] = {
                "with_triggers": _engine(engine, Path(tmp), True),
                "without_triggers": _engine(engine, Path(tmp), False),
            }
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
