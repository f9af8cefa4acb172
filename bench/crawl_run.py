"""One measured crawl in its own process: submit N site URLs, run a worker pool to the end.

Prints one JSON line: pages, seconds, pages per second, peak RSS of this process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select

from forager.config import load_settings
from forager.db.models import CrawlTask
from forager.queue.submit import SubmitSpec, submit_urls
from forager.runtime import open_database
from forager.worker.pool import WorkerPool


async def run(database_url: str, urls: list[str], concurrency: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="forager-bench-") as tmp:
        settings = load_settings(
            data_dir=Path(tmp),
            database_url=database_url,
            default_crawl_delay_seconds=0,
            default_max_concurrent_requests=concurrency,
            poll_seconds=0.05,
            log_level="WARNING",
        )
        db = await open_database(settings)
        await submit_urls(db, settings, [SubmitSpec(u, created_by="bench") for u in urls])
        pool = WorkerPool(db, settings, concurrency=concurrency)
        started = time.perf_counter()
        runner = asyncio.create_task(pool.run())
        while True:
            async with db.reader() as session:
                done = await session.scalar(
                    select(func.count()).where(CrawlTask.status.in_(["completed", "failed"]))
                )
            if done == len(urls):
                break
            await asyncio.sleep(0.1)
        seconds = time.perf_counter() - started
        pool.stop()
        await runner
        async with db.reader() as session:
            completed = await session.scalar(
                select(func.count()).where(CrawlTask.status == "completed")
            )
        await db.dispose()
    return {
        "pages": float(completed or 0),
        "seconds": round(seconds, 2),
        "pages_per_s": round((completed or 0) / seconds, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--urls-file", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    urls = Path(args.urls_file).read_text().split()
    print(json.dumps(asyncio.run(run(args.database_url, urls, args.concurrency))))


if __name__ == "__main__":
    main()
