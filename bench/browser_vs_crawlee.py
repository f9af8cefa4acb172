"""Browser crawls beside Crawlee for Python's ``PlaywrightCrawler`` (issue 36).

The site: N product pages (default 300) whose price exists only once an inline script has run
(``tests.support.pages.js_price_page``: the name in the ``<h1>``, "Loading price..." in the
HTML, the price written into ``#price`` by the script), served by nginx as in
bench/versus_scrapy.py, on 127.0.0.1. Both tools render every page in Debian's Chromium
(``/usr/bin/chromium``), 8 pages at once, no crawl delay, one retry:

- Forager: the domain set to ``fetcher: browser`` (as an operator would on the dashboard or
  ``PATCH /domains``), the URLs submitted, then one ``forager worker --concurrency 8`` on a
  SQLite file (``FORAGER_BROWSER_MAX_PAGES`` is 8 by default) until every task has ended;
  products (name, price) land in its products table, parsed by the generic parser.
- Crawlee: ``PlaywrightCrawler`` (bench dependency group) with ``executable_path`` set to the
  same Chromium and concurrency pinned to 8, a handler reading the ``<h1>`` and ``#price`` and
  ``push_data``-ing them, the dataset exported to JSON at the end. Everything else is
  Crawlee's default (its fingerprints, its file storage under ./storage, a new page per
  request in one shared context). As root, Crawlee needs ``chromium_sandbox: False``;
  Forager runs Chromium sandboxed as ``nobody`` (its default), which costs it a zygote.

The tools run in turn (``FORAGER_BENCH_BROWSER_ROUNDS``, default 3), after one small
unmeasured run of each (bytecode compiled, Chromium's files in the page cache). Each run is a
child in a cpuacct cgroup of its own (``TreeCpu``): CPU of the whole tree, Chromium and its
renderers included. Memory of the whole tree: the cgroup's processes sampled every 0.2 s,
summing their PSS (shared pages divided among the processes sharing them: Chromium's
processes share much) and their RSS (counted once per process, an overcount); the peak of
each sum is kept, with CPU and PSS by kind of process (renderers, Playwright's driver, the
tool...) to say where they go. Every row is the median round by wall time. Results print as
tables and are saved to bench/results/browser_vs_crawlee.json.

    .venv/bin/python -m bench.browser_vs_crawlee
    FORAGER_BENCH_BROWSER_PAGES=100 FORAGER_BENCH_BROWSER_ROUNDS=1 \
        .venv/bin/python -m bench.browser_vs_crawlee      # a quick look
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.versus_scrapy import (
    ROOT,
    Nginx,
    TreeCpu,
    _measured,
    _result,
    _tree_cpu,
    forager_env,
    free_port,
    machine,
    merge_rounds,
    save_results,
)

PAGES = int(os.environ.get("FORAGER_BENCH_BROWSER_PAGES", "300"))
ROUNDS = max(1, int(os.environ.get("FORAGER_BENCH_BROWSER_ROUNDS", "3")))
CONCURRENCY = int(os.environ.get("FORAGER_BENCH_BROWSER_CONCURRENCY", "8"))
CHROMIUM = "/usr/bin/chromium"
HOST = "127.0.0.1"
# FORAGER_BENCH_BROWSER_ONLY=forager (or crawlee): one tool only, when profiling it.
ONLY = set(filter(None, os.environ.get("FORAGER_BENCH_BROWSER_ONLY", "").split(",")))
TIMEOUT = 900.0  # seconds a run may take before the bench gives up on it

CRAWLER = """\
import asyncio, sys
from crawlee import ConcurrencySettings
from crawlee.crawlers import PlaywrightCrawler, PlaywrightCrawlingContext

async def main() -> None:
    urls = open(sys.argv[1]).read().split()
    crawler = PlaywrightCrawler(
        browser_launch_options={{"executable_path": "{chromium}", "chromium_sandbox": False}},
        concurrency_settings=ConcurrencySettings(
            min_concurrency={c}, max_concurrency={c}, desired_concurrency={c}
        ),
        max_request_retries=1,
    )

    @crawler.router.default_handler
    async def handle(context: PlaywrightCrawlingContext) -> None:
        name = await context.page.locator("h1").text_content()
        price = await context.page.locator("#price").text_content()
        await context.push_data({{"url": context.request.url, "name": name, "price": price}})

    await crawler.run(urls)
    await crawler.export_data(sys.argv[2])

asyncio.run(main())
"""


def build_site(root: Path, pages: int) -> None:
    from tests.support.pages import js_price_page

    site = root / "site" / "p"
    site.mkdir(parents=True)
    for n in range(pages):
        price = Decimal(n % 500) + Decimal("0.99")
        (site / f"{n}.html").write_text(js_price_page(n, price), encoding="utf-8")


# -- memory of the whole tree ----------------------------------------------------------------


class TreeMemory:
    """The peak, over the run, of the summed PSS and RSS of a cgroup's processes, and where
    CPU and memory go by kind of process (``KINDS``).

    The CPU by kind is each process's last sampled CPU time: a process that ended between two
    samples loses up to 0.2 s of it (the cgroup's total does not), so it is a lower bound."""

    def __init__(self, tree: TreeCpu) -> None:
        self.procs = tree.path / "cgroup.procs" if tree.path is not None else None
        self.peak_pss = 0
        self.peak_rss = 0
        self.peak_processes = 0
        self.pss_by_kind: dict[str, int] = {}  # at the peak of the summed PSS
        self.cpu_by_pid: dict[str, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def _sample(self) -> None:
        if self.procs is None:
            return
        try:
            pids = self.procs.read_text().split()
        except OSError:
            return
        pss = rss = 0
        by_kind: dict[str, int] = {}
        for pid in pids:
            try:
                kind = _kind(pid)  # not kept: the wrapper a browser starts from execs it
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                cpu = (int(stat[11]) + int(stat[12])) / TICKS  # utime, stime
                own = 0
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        own = int(line.split()[1])
            except (OSError, IndexError):  # ended between the listing and the read
                continue
            self.cpu_by_pid[pid] = (kind, cpu)
            pss += own
            by_kind[kind] = by_kind.get(kind, 0) + own
        if pss > self.peak_pss:
            self.peak_pss, self.pss_by_kind = pss, by_kind
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_processes = max(self.peak_processes, len(pids))

    def figures(self) -> dict[str, Any]:
        cpu: dict[str, float] = {}
        for kind, seconds in self.cpu_by_pid.values():
            cpu[kind] = cpu.get(kind, 0.0) + seconds
        return {
            "tree_peak_pss_mb": round(self.peak_pss / 1024, 1),
            "tree_peak_rss_mb": round(self.peak_rss / 1024, 1),
            "tree_peak_processes": self.peak_processes,
            "cpu_s_by_kind": {k: round(v, 2) for k, v in sorted(cpu.items())},
            "peak_pss_mb_by_kind": {
                k: round(v / 1024, 1) for k, v in sorted(self.pss_by_kind.items())
            },
        }


TICKS = os.sysconf("SC_CLK_TCK")
KINDS = {  # Chromium's --type= switch: the kind of process
    "renderer": "Chromium renderers",
    "gpu-process": "Chromium GPU",
    "utility": "Chromium utility (network, storage)",
    "zygote": "Chromium zygotes",
}


def _kind(pid: str) -> str:
    """The kind of process ``pid`` is, from its command line."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    line = b" ".join(argv).decode(errors="replace")
    name = Path(argv[0].decode(errors="replace")).name
    for switch, kind in KINDS.items():  # some run as /proc/self/exe
        if f"--type={switch}" in line:
            return kind
    if "chrom" in name:
        return "Chromium browser process"
    if name == "node":
        return "Playwright driver (node)"
    if "multiprocessing" in line:
        return "parse processes"
    if "python" in name:
        return "the tool (Python)"
    return name or "other"


# -- the two tools -----------------------------------------------------------------------------


def run_crawlee(tmp: Path, urls_file: Path) -> dict[str, Any]:
    work = tmp / "crawlee"
    work.mkdir(exist_ok=True)
    script = work / "crawl.py"
    script.write_text(CRAWLER.format(chromium=CHROMIUM, c=CONCURRENCY))
    out = work / "products.json"
    out.unlink(missing_ok=True)
    tree = TreeCpu("crawlee")
    started = time.perf_counter()
    with TreeMemory(tree) as memory:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(urls_file), str(out)],
            cwd=work,
            stdout=(work / "crawlee.log").open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "CRAWLEE_LOG_LEVEL": "WARNING"},
            preexec_fn=tree.join,
        )
        m = _measured(proc, started)
    rows = json.loads(out.read_text()) if out.exists() else []
    priced = sum(1 for r in rows if (r.get("price") or "").startswith("$"))
    result = _result(
        len(rows), m["ended"], m["cpu_s"], m["peak_rss_mb"], exit=m["exit"], with_price=priced
    )
    return _tree_cpu({**result, **memory.figures()}, tree)


def run_forager(tmp: Path, urls_file: Path) -> dict[str, Any]:
    data = tmp / "forager"
    subprocess.run(["rm", "-rf", str(data)], check=True)
    data.mkdir()
    db_file = data / "forager.db"
    env = forager_env(
        data,
        FORAGER_DATABASE_URL=f"sqlite+aiosqlite:///{db_file}",
        FORAGER_POLL_SECONDS="0.2",
        FORAGER_DEFAULT_MAX_CONCURRENT_REQUESTS=str(CONCURRENCY),
        FORAGER_CHROMIUM_PATH=CHROMIUM,
    )
    subprocess.run(
        [sys.executable, "-m", "bench.browser_vs_crawlee", "setup", str(urls_file)],
        env=env,
        check=True,
        cwd=ROOT,
    )
    total = len(urls_file.read_text().split())
    tree = TreeCpu("forager")
    started = time.perf_counter()
    with TreeMemory(tree) as memory:
        proc = subprocess.Popen(
            [sys.executable, "-m", "forager.cli", "worker", "--concurrency", str(CONCURRENCY)],
            env=env,
            cwd=data,
            stderr=(data / "worker.log").open("wb"),
            preexec_fn=tree.join,
        )
        try:
            _wait_done(db_file, total, proc)
            wall = time.perf_counter() - started
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            m = _measured(proc, started)
    pages, priced = _products(db_file)
    result = _result(pages, wall, m["cpu_s"], m["peak_rss_mb"], exit=m["exit"], with_price=priced)
    return _tree_cpu({**result, **memory.figures()}, tree)


def _wait_done(db_file: Path, total: int, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + TIMEOUT
    with sqlite3.connect(db_file, timeout=30) as conn:
        while time.monotonic() < deadline and proc.poll() is None:
            (done,) = conn.execute(
                "SELECT count(*) FROM crawl_tasks WHERE status IN ('completed','failed')"
            ).fetchone()
            if done >= total:
                return
            time.sleep(0.1)
    raise RuntimeError(f"forager worker did not finish (exit {proc.poll()})")


def _products(db_file: Path) -> tuple[int, int]:
    """Pages crawled (completed tasks) and the products among them with a price."""
    with sqlite3.connect(db_file, timeout=30) as conn:
        (pages,) = conn.execute(
            "SELECT count(*) FROM crawl_tasks WHERE status = 'completed'"
        ).fetchone()
        (priced,) = conn.execute(
            "SELECT count(*) FROM products WHERE price IS NOT NULL AND product_name <> ''"
        ).fetchone()
    return int(pages), int(priced)


def setup_main(urls_file: str) -> None:
    """Create the database of FORAGER_DATABASE_URL, the domain on ``fetcher: browser``, and
    submit the URLs (a child process, not measured)."""
    from forager.config import get_settings
    from forager.domains import admin
    from forager.queue.door import SubmitSpec, submit_urls
    from forager.runtime import open_database

    async def go() -> None:
        settings = get_settings()
        db = await open_database(settings)
        urls = Path(urls_file).read_text().split()
        base = urls[0].split("/p/")[0]
        values = {"base_url": base, "fetcher": "browser", "ignore_robots": True}
        await admin.create(db, settings, HOST, values | {"crawl_delay_seconds": 0})
        await submit_urls(db, settings, [SubmitSpec(u, created_by="bench") for u in urls])
        await db.dispose()

    asyncio.run(go())


# -- the run -----------------------------------------------------------------------------------


def require_crawlee() -> None:
    try:
        import crawlee  # noqa: F401
    except ImportError:
        raise SystemExit(
            "Crawlee is not installed in this environment: run `make bench`, or "
            "`uv sync --frozen --group bench` first (make test and make lint sync without it)"
        ) from None


def main() -> None:
    require_crawlee()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as an installed program runs
    results: dict[str, Any] = {
        "machine_before": machine(),
        "pages": PAGES,
        "concurrency": CONCURRENCY,
        "rounds": ROUNDS,
        "samples": {},
        "runs": {},
    }
    plan = {"crawlee": run_crawlee, "forager": run_forager}
    plan = {k: v for k, v in plan.items() if not ONLY or k in ONLY}
    with tempfile.TemporaryDirectory(prefix="forager-browser-vs-") as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        build_site(tmp, PAGES)
        nginx = Nginx(tmp, port)
        try:
            urls_file = tmp / "urls.txt"
            warm = tmp / "warm.txt"
            urls = [f"http://{HOST}:{port}/p/{n}.html" for n in range(PAGES)]
            urls_file.write_text("\n".join(urls))
            warm.write_text("\n".join(urls[:16]))
            for name, run in plan.items():
                print(name, "warm-up", json.dumps(run(tmp, warm)), file=sys.stderr, flush=True)
            for _ in range(ROUNDS):
                for name, run in plan.items():
                    try:
                        result = run(tmp, urls_file)
                    except Exception as exc:  # one failed run must not lose the others
                        result = {"error": repr(exc)}
                    result["load_average"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
                    results["samples"].setdefault(name, []).append(result)
                    results["runs"][name] = merge_rounds(results["samples"][name])
                    print(name, json.dumps(result), file=sys.stderr, flush=True)
                    save(results)
        finally:
            nginx.stop()
    results["machine_after"] = machine()
    save(results)
    print(table(results))


def save(results: dict[str, Any]) -> None:
    save_results("browser_vs_crawlee", results)


def table(results: dict[str, Any]) -> str:
    lines = [
        "| run | pages | with price | wall | pages/s | CPU (tree) | CPU per page "
        "| peak PSS (tree) | peak RSS (tree, sum) | processes | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    names = {"crawlee": "Crawlee PlaywrightCrawler", "forager": "forager worker, browser"}
    for key, r in results["runs"].items():
        if "error" in r:
            lines.append(f"| {names[key]} | failed: {r['error']} |")
            continue
        lines.append(
            f"| {names[key]} | {r['pages']} | {r['with_price']} | {r['wall_s']} s | "
            f"{r['pages_per_s']} | {r['cpu_s']} s | {r['cpu_ms_per_page']} ms | "
            f"{r['tree_peak_pss_mb']} MB | {r['tree_peak_rss_mb']} MB | "
            f"{r['tree_peak_processes']} | {r['load_average']} |"
        )
    lines += [
        "",
        "| run | kind of process | CPU (sampled) | PSS at the peak |",
        "|---|---|---:|---:|",
    ]
    for key, r in results["runs"].items():
        cpu, pss = r.get("cpu_s_by_kind", {}), r.get("peak_pss_mb_by_kind", {})
        for kind in sorted(set(cpu) | set(pss)):
            lines.append(
                f"| {names[key]} | {kind} | {cpu.get(kind, 0)} s | {pss.get(kind, 0)} MB |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "setup":
        setup_main(sys.argv[2])
    else:
        main()
