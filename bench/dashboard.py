"""The dashboard's live publisher on a large queue: 1,000,000 tasks, both engines.

Measures one publisher poll (what every open tab shares once a second): on a quiet queue, when
a task moved since the last poll (the counts by status are read again), and with the
ten-second figures, then runs the publisher for a few seconds with 100 subscribed tabs and
counts its polls. ``python -m bench.dashboard [sqlite|postgresql]``; prints JSON.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text, update

from bench.api_latency import TASKS, _fill_sql
from bench.pg import scratch_database
from forager.config import load_settings
from forager.db.models import CrawlTask
from forager.db.types import utcnow
from forager.runtime import open_database
from forager.web import live
from forager.web.live import Publisher

REPEAT = 20
TABS = 100
RUN_SECONDS = 5.0


def _summary(times: list[float]) -> dict[str, float]:
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, round(0.95 * len(times)) - 1)], 1),
    }


async def run(database_url: str, data_dir: Path) -> dict[str, Any]:
    settings = load_settings(data_dir=data_dir, database_url=database_url, log_level="WARNING")
    db = await open_database(settings)
    try:
        started = time.perf_counter()
        async with db.engine.begin() as conn:
            for statement in _fill_sql(db.dialect)[:2]:  # domains and tasks
                await conn.execute(text(statement))
            await conn.execute(text("ANALYZE"))
        fill_seconds = round(time.perf_counter() - started, 1)
        publisher = Publisher(db, settings)
        # A steady queue: the filled rows count as already published (not one burst of a
        # million changes). The first poll reads the hourly figures too.
        publisher._watermark = utcnow()
        first = await publisher.poll()
        fast: list[float] = []
        for _ in range(REPEAT):
            began = time.perf_counter()
            await publisher.poll()
            fast.append((time.perf_counter() - began) * 1000)
        moved: list[float] = []  # a busy queue: some task moved since the last poll
        for n in range(REPEAT):
            async with db.session() as session:
                await session.execute(
                    update(CrawlTask).where(CrawlTask.id == n + 1).values(updated_at=utcnow())
                )
            began = time.perf_counter()
            snapshot = await publisher.poll()
            moved.append((time.perf_counter() - began) * 1000)
            assert snapshot["changed_tasks"], "the move was not seen"
        slow: list[float] = []
        for _ in range(5):
            publisher._slow = {}  # force the ten-second figures (and the recount)
            publisher._slow_at = 0.0
            began = time.perf_counter()
            await publisher.poll()
            slow.append((time.perf_counter() - began) * 1000)
        shared = Publisher(db, settings)
        tabs = [shared.subscribe() for _ in range(TABS)]
        await asyncio.sleep(RUN_SECONDS)
        received = sum(tab.qsize() for tab in tabs)
        polls = shared.polls
        await shared.stop()
    finally:
        await db.dispose()
    return {
        "tasks": TASKS,
        "fill_seconds": fill_seconds,
        "changed_in_first_poll": len(first["changed_tasks"]),
        "poll_nothing_moved": _summary(fast),
        "poll_a_task_moved": _summary(moved),
        "poll_with_hourly_figures": _summary(slow),
        f"polls_in_{RUN_SECONDS:g}s_with_{TABS}_tabs": polls,
        "snapshots_delivered": received,
        "interval_seconds": live.INTERVAL,
    }


def main() -> None:
    engines = sys.argv[1:] or ["sqlite", "postgresql"]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="forager-dashboard-bench-") as tmp:
        if "sqlite" in engines:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
            out["sqlite"] = asyncio.run(run(url, Path(tmp)))
        if "postgresql" in engines:
            with scratch_database("forager_bench_dashboard") as url:
                out["postgresql"] = asyncio.run(run(url, Path(tmp)))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
