"""What the worker's group writer costs per page: CPU of ``GroupWriter`` groups alone.

N tasks on one domain are submitted and claimed (not measured), then finished through one
``GroupWriter`` in groups of 64 as a crawl's fetches end: each a fetched page with a product
record (one price), an attempt and an answer on the domain. The measured span is the writer's
work only; the figure is the process's CPU per page (``time.process_time``: on SQLite that
includes the database's own work on aiosqlite's thread; on PostgreSQL the server's backends
are read apart from ``/proc``, as ``server_cpu_ms_per_page``: the server must run on this
machine, and the unmeasured claims between groups are in that figure). The median of
``FORAGER_BENCH_WRITER_ROUNDS`` rounds (default 5), each on a fresh database.
``python -m bench.writer_group [sqlite|postgresql]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

from sqlalchemy import text

from bench.pg import scratch_database
from forager.config import load_settings
from forager.db.engine import Database
from forager.db.types import utcnow
from forager.parse.base import ProductRecord
from forager.queue.door import FETCHED_VIA, Ending, FetchAttempt, SubmitSpec, TaskQueue, submit_urls
from forager.queue.lifecycle import TaskStatus
from forager.runtime import open_database
from forager.worker.writer import Finish, GroupWriter

PAGES = int(os.environ.get("FORAGER_BENCH_WRITER_PAGES", "2048"))
ROUNDS = int(os.environ.get("FORAGER_BENCH_WRITER_ROUNDS", "5"))
GROUP = 64
# FORAGER_BENCH_WRITER_VIA=0: the tasks pass through no phases (no downloaded / queued_parse /
# parsing events): what those three event rows per page cost the writer.
VIA = FETCHED_VIA if os.environ.get("FORAGER_BENCH_WRITER_VIA", "1") == "1" else ()


def _finish(task: object, n: int) -> Finish:
    now = utcnow()
    attempt = FetchAttempt(
        started_at=now, finished_at=now, status_code=200, page_path=f"k/{n}", bytes_received=15_000
    )
    ending = Ending(
        task,  # type: ignore[arg-type]
        "bench",
        [TaskStatus.CRAWLING],
        via=VIA,
        fetched=(f"k/{n}", 200, 5, None),
        fetch_attempt=attempt,
    )
    record = ProductRecord(
        url=f"https://shop.example/p/{n}",
        product_name=f"Product {n}",
        price=Decimal("9.99"),
        currency="USD",
        sku=f"SKU-{n}",
        parser_name="generic",
        parser_version="2",
    )
    return Finish(ending, record=record, answered_ms=5)


def _backend_cpu(pids: set[int]) -> float:
    """Seconds of CPU the PostgreSQL backends ``pids`` have used (they run on this machine)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


async def _backends(db: Database) -> set[int]:
    if db.dialect != "postgresql":
        return set()
    async with db.reader() as session:
        found = await session.execute(
            text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        )
        return set(found.scalars())


async def _round(url: str, data_dir: Path) -> tuple[float, float]:
    settings = load_settings(
        database_url=url,
        data_dir=data_dir,
        writer_batch_size=GROUP,
        writer_interval_seconds=0.05,
        default_crawl_delay_seconds=0,
        default_max_concurrent_requests=GROUP,
    )
    db = await open_database(settings)
    try:
        specs = [SubmitSpec(f"https://shop.example/p/{n}") for n in range(PAGES)]
        await submit_urls(db, settings, specs)
        queue = TaskQueue(db, settings)
        writer = GroupWriter(db, settings, None)
        spent, written = 0.0, 0
        server: dict[int, float] = {}
        for first in range(0, PAGES, GROUP):
            group = await queue.claim("bench", GROUP, start=True)  # unmeasured
            assert len(group) == GROUP, f"{len(group)} claimed"
            started = time.process_time()
            statuses = await asyncio.gather(
                *(writer.finish(_finish(t, first + i)) for i, t in enumerate(group))
            )
            if first:  # the first group warms the statement caches, unmeasured
                spent += time.process_time() - started
                written += len(group)
            if first == 0:
                server = {pid: _backend_cpu({pid}) for pid in await _backends(db)}
            assert all(s == TaskStatus.COMPLETED for s in statuses), statuses
        await writer.aclose()
        pids = await _backends(db)
        server_s = sum(_backend_cpu({pid}) - server.get(pid, 0.0) for pid in pids)
        return spent * 1000 / written, server_s * 1000 / written
    finally:
        await db.dispose()


def main() -> None:
    engine = sys.argv[1] if len(sys.argv) > 1 else "sqlite"
    figures: list[float] = []
    servers: list[float] = []
    for n in range(ROUNDS):
        with tempfile.TemporaryDirectory() as tmp:
            if engine == "sqlite":
                url = f"sqlite+aiosqlite:///{tmp}/bench.db"
                figure, server = asyncio.run(_round(url, Path(tmp)))
            else:
                with contextlib.ExitStack() as stack:
                    url = stack.enter_context(scratch_database(f"forager_bench_writer_{n}"))
                    figure, server = asyncio.run(_round(url, Path(tmp)))
            figures.append(figure)
            servers.append(server)
    load = os.getloadavg()[0]
    print(
        json.dumps(
            {
                "engine": engine,
                "pages": PAGES,
                "group": GROUP,
                "via_events": len(VIA),
                "writer_cpu_ms_per_page": round(statistics.median(figures), 3),
                "rounds": [round(f, 3) for f in figures],
                # PostgreSQL: its backends' CPU over the same groups (their claims included)
                "server_cpu_ms_per_page": round(statistics.median(servers), 3),
                "load_1min": round(load, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
