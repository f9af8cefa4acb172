"""``python -m bench.escalation``: fetcher ``auto`` against pinning ``browser`` for every page.

The test site (tests/support/site.py, its own process) serves three loopback hosts; on two of
them the product pages carry their price in the HTML, on the third (``/js-price/N``) the price
exists only once a script has run — a third of the pages need a browser. Each run crawls the
same pages with the real worker pool on a fresh SQLite database, in a process of its own: once
with every domain on ``auto``, once with every domain pinned to ``browser``. For each: wall
time, pages/s, CPU of the whole process tree (the worker, its parse processes, Chromium: psutil,
sampled every 0.2 s, so a process that ended between samples loses at most that much), the
products found, and the share of pages each fetcher served (the fetcher whose
response was kept) beside the fetches each made (a climb fetches a page twice).

Prints a table and saves bench/results/escalation.json. ``FORAGER_BENCH_ESCALATION_PAGES``:
pages per host (default 100); ``FORAGER_BENCH_CONCURRENCY`` (default 16).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import func, select

from forager.config import Settings, load_settings
from forager.db.engine import Database
from forager.db.models import CrawlTask, Product
from forager.domains import admin
from forager.fetch.base import FetchRequest, FetchResponse
from forager.fetch.fetcher_set import FetcherSet
from forager.queue.door import SubmitSpec, submit_urls
from forager.runtime import open_database
from forager.worker.pool import WorkerPool
from tests.support.site import SiteProcess

ROOT = Path(__file__).resolve().parents[1]
PER_HOST = int(os.environ.get("FORAGER_BENCH_ESCALATION_PAGES", "100"))
CONCURRENCY = int(os.environ.get("FORAGER_BENCH_CONCURRENCY", "16"))
PLAIN_HOSTS = ("127.0.0.1", "127.0.0.2")
SCRIPTED_HOST = "127.0.0.3"
TIMEOUT = 900.0  # seconds a run may take before the bench gives up
WARM_HOST = "127.0.0.4"  # one http page, before the measurement
MODES = ("auto", "browser")


class _Counting:
    """The pool's fetcher, counting each fetcher's fetches and which one's page was kept."""

    def __init__(self, inner: FetcherSet) -> None:
        self.inner = inner
        self.fetches: Counter[str] = Counter()
        self.served: dict[str, str] = {}  # url -> the fetcher of its last answer

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        self.fetches[request.fetcher] += 1
        response = await self.inner.fetch(request)
        self.served[request.url] = request.fetcher
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class _TreeCpu:
    """CPU seconds of this process and every descendant, sampled in a thread."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            self.seen[proc.pid] = max(self.seen.get(proc.pid, 0.0), times.user + times.system)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def __enter__(self) -> _TreeCpu:
        self._sample()
        self.start = sum(self.seen.values())
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def seconds(self) -> float:
        return sum(self.seen.values()) - self.start


async def _until_done(db: Database, count: int, runner: asyncio.Task[None]) -> None:
    """Until ``count`` tasks have ended (at most ``TIMEOUT`` seconds)."""
    async with asyncio.timeout(TIMEOUT):
        await _ended(db, count, runner)


async def _ended(db: Database, count: int, runner: asyncio.Task[None]) -> None:
    while not runner.done():
        async with db.reader() as session:
            done = await session.scalar(
                select(func.count()).where(CrawlTask.status.in_(["completed", "failed"]))
            )
        if done == count:
            return
        await asyncio.sleep(0.05)
    runner.result()
    raise SystemExit("the worker pool stopped early")


async def _run(mode: str, base: str, urls: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="forager-bench-") as tmp:
        settings: Settings = load_settings(
            data_dir=Path(tmp),
            database_url=f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}",
            default_crawl_delay_seconds=0,
            default_max_concurrent_requests=CONCURRENCY,
            poll_seconds=0.05,
            log_level="WARNING",
        )
        db = await open_database(settings)
        for host in (*PLAIN_HOSTS, SCRIPTED_HOST, WARM_HOST):
            values = {"base_url": base.replace("HOST", host), "fetcher": mode}
            values |= {"ignore_robots": True, "crawl_delay_seconds": 0}
            if host == WARM_HOST:
                values["fetcher"] = "http"
            await admin.create(db, settings, host, values)
        fetcher = _Counting(FetcherSet(settings))
        pool = WorkerPool(db, settings, concurrency=CONCURRENCY, fetcher=fetcher)
        runner = asyncio.create_task(pool.run())
        # Start-up (parse processes importing the parsers) is not measured: one http page first.
        warm = base.replace("HOST", WARM_HOST) + "/product/1"
        await submit_urls(db, settings, [SubmitSpec(warm, created_by="bench")])
        await _until_done(db, 1, runner)
        fetcher.fetches.clear()
        fetcher.served.clear()
        with _TreeCpu() as cpu:
            started = time.perf_counter()
            await submit_urls(db, settings, [SubmitSpec(u, created_by="bench") for u in urls])
            await _until_done(db, len(urls) + 1, runner)
            seconds = time.perf_counter() - started
        pool.stop()
        await runner
        async with db.reader() as session:
            products = await session.scalar(
                select(func.count())
                .select_from(Product)
                .where(Product.price.is_not(None), Product.url.not_like(f"%{WARM_HOST}%"))
            )
        await db.dispose()
    served = Counter(fetcher.served.values())
    return {
        "mode": mode,
        "pages": len(urls),
        "products_with_price": products,
        "seconds": round(seconds, 2),
        "pages_per_s": round(len(urls) / seconds, 1),
        "cpu_seconds": round(cpu.seconds, 2),
        "cpu_ms_per_page": round(cpu.seconds / len(urls) * 1000, 1),
        "served": {k: round(served[k] / len(urls), 3) for k in sorted(served)},
        "fetches": dict(sorted(fetcher.fetches.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--base")
    parser.add_argument("--urls-file")
    args = parser.parse_args()
    if args.mode:  # one measured run, in its own process
        urls = Path(args.urls_file).read_text().split()
        print(json.dumps(asyncio.run(_run(args.mode, args.base, urls))))
        return
    results: dict[str, Any] = {"per_host": PER_HOST, "concurrency": CONCURRENCY, "runs": []}
    with (
        tempfile.TemporaryDirectory(prefix="forager-bench-") as tmp,
        SiteProcess([*PLAIN_HOSTS, SCRIPTED_HOST, WARM_HOST]) as site,
    ):
        urls = [site.url(f"/product/{n}", host=h) for h in PLAIN_HOSTS for n in range(PER_HOST)]
        urls += [site.url(f"/js-price/{n}", host=SCRIPTED_HOST) for n in range(PER_HOST)]
        urls_file = Path(tmp) / "urls.txt"
        urls_file.write_text("\n".join(urls))
        base = site.url("/", host="HOST").rstrip("/")
        for mode in MODES:
            out = subprocess.run(
                [sys.executable, "-m", "bench.escalation", "--mode", mode, "--base", base,
                 "--urls-file", str(urls_file)],
                cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True,
            ).stdout  # fmt: skip
            results["runs"].append(json.loads(out.strip().splitlines()[-1]))
            print(f"{mode}: {results['runs'][-1]}", file=sys.stderr, flush=True)
    print("| fetcher | pages | wall | pages/s | CPU | CPU per page | pages served by | fetches |")
    for r in results["runs"]:
        shares = ", ".join(f"{k} {v:.0%}" for k, v in r["served"].items())
        fetches = ", ".join(f"{k} {v}" for k, v in r["fetches"].items())
        print(
            f"| {r['mode']} | {r['pages']} | {r['seconds']} s | {r['pages_per_s']} | "
            f"{r['cpu_seconds']} s | {r['cpu_ms_per_page']} ms | {shares} | {fetches} |"
        )
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "escalation.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
