"""``python -m bench.fetchers``: pages/s and CPU per page of each fetcher, and the browser's memory.

First the plain HTTP clients that the ``http`` fetcher could be built on are compared doing
the same plain GET (no egress checks, no bounded decoding: the client alone): httpx, aiohttp
(measured when installed: ``uv pip install aiohttp``; Forager does not depend on it) and
curl_cffi without impersonation. Then each fetcher (http, impersonate, browser) fetches
product pages of the local test site (tests/support/site.py in its own process, so the
server is not starved by the client) at concurrency 1, 16, 64 and 256, straight through the
fetcher (no database: this measures the fetcher). CPU per page is this process's CPU time
(user + system) over the pages fetched: the client's cost, whatever the machine's load.
The browser is measured twice: waiting for network idle (its default) and
waiting for a selector. Then the browser fetcher renders 500 pages at concurrency 16 while
the memory (PSS) of this process and its Chromium processes is sampled: the peak, and
the total after 100 and after 500 pages (contexts are recycled, so it should not grow).

Prints a table and saves bench/results/fetchers.json. ``FORAGER_BENCH_FETCH_SECONDS`` bounds
each measurement (default 10 s of fetching, and at least one page per concurrent fetch).
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

from forager.config import Settings
from forager.errors import FetchError
from forager.fetch.base import Fetcher, FetchRequest
from forager.fetch.fetcher_set import build_fetcher
from tests.support.site import SiteProcess

ROOT = Path(__file__).resolve().parents[1]
SECONDS = float(os.environ.get("FORAGER_BENCH_FETCH_SECONDS", "10"))
CONCURRENCIES = (1, 16, 64, 256)
RSS_PAGES = 500
UA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131 Safari"
VARIANTS: list[tuple[str, str, str | None]] = [
    # (label, fetcher, wait_for_selector)
    ("http", "http", None),
    ("impersonate", "impersonate", None),
    ("browser (network idle)", "browser", None),
    ("browser (selector)", "browser", "h1.product-title"),
]


def _tree_rss_bytes(root: int) -> int:
    """Memory of ``root`` and all its descendants (Chromium's processes), as PSS: each page
    shared by several processes counts once in all (summed RSS would count it per process)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
    return total


async def _run(
    fetcher: Fetcher,
    site: SiteProcess,
    kind: str,
    selector: str | None,
    concurrency: int,
    *,
    pages: int | None = None,
    seconds: float = SECONDS,
    start: int = 0,
) -> dict[str, Any]:
    """Fetch with ``concurrency`` workers until ``pages`` are done (or ``seconds`` passed)."""
    counter = iter(range(start, start + 10**9))
    done = errors = 0
    began = time.perf_counter()
    stop_at = began + seconds

    async def worker() -> None:
        nonlocal done, errors
        while True:
            if pages is not None and done + errors >= pages:
                return
            if pages is None and time.perf_counter() >= stop_at and done >= concurrency:
                return
            n = next(counter)
            url = site.url(f"/product/{n}?kb=16", host=f"127.0.0.{1 + n % 5}")
            try:
                await fetcher.fetch(FetchRequest(url, UA, fetcher=kind, wait_for_selector=selector))
                done += 1
            except FetchError as exc:
                errors += 1
                if errors <= 3:
                    print(f"    error: {exc.error_type}: {exc.message}", file=sys.stderr)

    cpu = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    cpu = time.process_time() - cpu
    return {
        "pages": done,
        "errors": errors,
        "seconds": round(elapsed, 2),
        "pages_per_s": round(done / elapsed, 1),
        "cpu_ms_per_page": round(cpu * 1000 / max(done, 1), 3),
    }


async def _throughput(site: SiteProcess, settings: Settings) -> list[dict[str, Any]]:
    rows = []
    for label, kind, selector in VARIANTS:
        fetcher = build_fetcher(kind, settings)
        try:
            await _run(fetcher, site, kind, selector, 4, pages=8)  # warm up (browser start)
            for concurrency in CONCURRENCIES:
                result = await _run(fetcher, site, kind, selector, concurrency)
                row = {"fetcher": label, "concurrency": concurrency, **result}
                _show(label, concurrency, result)
                rows.append(row)
        finally:
            await fetcher.aclose()
    return rows


def _show(label: str, concurrency: int, result: dict[str, Any]) -> None:
    print(
        f"  {label:24} c={concurrency:<4} {result['pages_per_s']:>8} pages/s "
        f"{result['cpu_ms_per_page']:>7} ms CPU/page "
        f"({result['pages']} pages, {result['errors']} errors)",
        flush=True,
    )


class _PlainClient:
    """One raw client doing a plain GET (for the comparison; not a Forager fetcher)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.client: Any = None

    async def start(self) -> None:
        if self.name == "httpx":
            import httpx

            self.client = httpx.AsyncClient(
                http2=True,
                trust_env=False,
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=256),
            )
        elif self.name == "aiohttp":
            import aiohttp

            connector = aiohttp.TCPConnector(limit=256)
            self.client = aiohttp.ClientSession(connector=connector, trust_env=False)
        else:
            from curl_cffi.requests import AsyncSession

            self.client = AsyncSession(max_clients=256, trust_env=False)

    async def fetch(self, request: FetchRequest) -> None:
        headers = {"User-Agent": request.user_agent, "Accept-Encoding": "gzip, deflate"}
        if self.name == "aiohttp":
            async with self.client.get(request.url, headers=headers) as response:
                await response.read()
        else:
            response = await self.client.get(request.url, headers=headers)
            if self.name == "httpx":
                await response.aread()

    async def aclose(self) -> None:
        await self.client.close() if self.name != "httpx" else await self.client.aclose()


async def _clients(site: SiteProcess) -> list[dict[str, Any]]:
    """The plain clients side by side (see the module docstring)."""
    rows = []
    for name in ("httpx", "aiohttp", "curl_cffi"):
        if name == "aiohttp":
            try:
                import aiohttp  # noqa: F401
            except ImportError:
                print("  aiohttp not installed: skipped", flush=True)
                continue
        client = _PlainClient(name)
        await client.start()
        try:
            await _run(client, site, "http", None, 4, pages=8)  # type: ignore[arg-type]
            for concurrency in CONCURRENCIES:
                result = await _run(client, site, "http", None, concurrency)  # type: ignore[arg-type]
                _show(f"{name} (plain GET)", concurrency, result)
                rows.append({"client": name, "concurrency": concurrency, **result})
        finally:
            await client.aclose()
    return rows


async def _browser_memory(site: SiteProcess, settings: Settings) -> dict[str, Any]:
    fetcher = build_fetcher("browser", settings)
    me = os.getpid()
    peak = 0
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, await asyncio.to_thread(_tree_rss_bytes, me))
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample())
    try:
        first = await _run(fetcher, site, "browser", None, 16, pages=100, seconds=1e9)
        after_100 = await asyncio.to_thread(_tree_rss_bytes, me)
        rest = await _run(
            fetcher, site, "browser", None, 16, pages=RSS_PAGES - 100, seconds=1e9, start=100
        )
        after_500 = await asyncio.to_thread(_tree_rss_bytes, me)
        contexts = (fetcher.contexts_created, fetcher.contexts_closed)  # type: ignore[attr-defined]
    finally:
        sampling = False
        await sampler
        await fetcher.aclose()
    after_close = await asyncio.to_thread(_tree_rss_bytes, me)
    mib = 1024 * 1024
    return {
        "pages": first["pages"] + rest["pages"],
        "errors": first["errors"] + rest["errors"],
        "concurrency": 16,
        "peak_pss_mib": round(peak / mib),
        "pss_after_100_mib": round(after_100 / mib),
        "pss_after_500_mib": round(after_500 / mib),
        "pss_after_close_mib": round(after_close / mib),
        "contexts_created": contexts[0],
        "contexts_closed": contexts[1],
    }


async def main() -> None:
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="forager-bench-fetch-") as tmp,
        SiteProcess([f"127.0.0.{n}" for n in range(1, 6)]) as site,
    ):
        settings = Settings(
            data_dir=Path(tmp),
            database_url=f"sqlite:///{Path(tmp) / 'unused.db'}",
            fetch_timeout_seconds=60.0,
        )
        print("plain clients (pages/s, CPU per page; /product/N?kb=16):", flush=True)
        clients = await _clients(site)
        print("fetcher throughput (pages/s, /product/N?kb=16, ~17 KB pages):", flush=True)
        rows = await _throughput(site, settings)
        print(f"browser fetcher memory over {RSS_PAGES} pages:", flush=True)
        memory = await _browser_memory(site, settings)
        print(f"  {memory}", flush=True)
    results = {
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "seconds_per_measurement": SECONDS,
        "plain_clients": clients,
        "throughput": rows,
        "browser_memory": memory,
    }
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fetchers.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"saved {out / 'fetchers.json'}")


if __name__ == "__main__":
    asyncio.run(main())
