"""Forager beside Scrapy on one static site, measured in the same run (issue 14).

The site: N product pages (default 3,000, ~15 KB each, schema.org JSON-LD and a visible price)
written to a temp dir and served by Debian's nginx (installed with apt-get when missing) in the
foreground, with its own config, on one ephemeral port of 127.0.0.1–10. Then, once with every
URL on one host and once spread over ten:

- Scrapy (bench dependency group), a 25-line spider: JSON-LD → JSONL feed, concurrency 64;
- ``forager crawl --concurrency 64`` (SQLite);
- the same with ``--selectors``: a selector map of the spider's four JSON-LD fields instead of
  the generic parser (which checks the JSON-LD against the visible page), so both tools read
  the same things from each page and keep their own (Forager: every page stored, attempts,
  events, products and price history);
- one ``forager worker --concurrency 64`` on PostgreSQL, then two at 32 each, four at 16 each;
- (one host only) one ``forager worker --concurrency 256``, for its peak RSS.

No crawl delay, 64 requests per domain for both tools; one small unmeasured run of each first
(imports from compiled bytecode, as after an installed program's first run). Each tool runs
as a child process in a cpuacct cgroup of its own, which gives the CPU time of its whole
process tree (``TreeCpu``); peak RSS (the largest process) comes from ``wait4``. A worker
row also gives the CPU the PostgreSQL server used meanwhile (``bench.pg.ServerCpu``: the
database is on this machine, outside the tree's cgroup) and the CPU per page with it. Results
print as a table with the ratio to Scrapy's pages/s, and are saved to
bench/results/versus_scrapy.json.

    .venv/bin/python -m bench.versus_scrapy            # FORAGER_BENCH_VS_PAGES=3000
    FORAGER_BENCH_VS_ONLY=crawl,scrapy FORAGER_BENCH_VS_LAYOUTS=1 \
        .venv/bin/python -m bench.versus_scrapy      # one layout, two tools
    FORAGER_BENCH_VS_ROUNDS=3 .venv/bin/python -m bench.versus_scrapy   # on a noisy machine
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.pg import ServerCpu, pg_admin, scratch_url

ROOT = Path(__file__).resolve().parents[1]
PAGES = int(os.environ.get("FORAGER_BENCH_VS_PAGES", "3000"))
ONLY = set(filter(None, os.environ.get("FORAGER_BENCH_VS_ONLY", "").split(",")))
LAYOUTS = {"1 host": ["127.0.0.1"], "10 hosts": [f"127.0.0.{n}" for n in range(1, 11)]}
# FORAGER_BENCH_VS_LAYOUTS=1 runs the one-host layout only (quicker).
RUN_LAYOUTS = list(LAYOUTS)[: int(os.environ.get("FORAGER_BENCH_VS_LAYOUTS", "2"))]
# FORAGER_BENCH_VS_ROUNDS=3 runs every row three times, the tools in turn; each row then keeps
# its median round and the median and range of its ratios to Scrapy (one per round).
ROUNDS = max(1, int(os.environ.get("FORAGER_BENCH_VS_ROUNDS", "1")))
PAGE_KB = 12  # ~15 KB pages

SPIDER = """\
import json, scrapy

class Products(scrapy.Spider):
    name = "products"
    custom_settings = {
        "CONCURRENT_REQUESTS": 64, "CONCURRENT_REQUESTS_PER_DOMAIN": 64, "DOWNLOAD_DELAY": 0,
        "ROBOTSTXT_OBEY": False, "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False,
    }

    async def start(self):
        for url in open(self.urls_file).read().split():
            yield scrapy.Request(url)

    def parse(self, response):
        for text in response.css('script[type="application/ld+json"]::text').getall():
            data = json.loads(text)
            if data.get("@type") == "Product":
                offer = data.get("offers") or {}
                yield {"url": response.url, "name": data.get("name"), "sku": data.get("sku"),
                       "price": offer.get("price"), "currency": offer.get("priceCurrency")}
                return
"""

# What the spider reads, as a selector map for ``forager crawl --selectors``: the same four
# fields from the same JSON-LD, no generic parser behind it (``fallback``: false).
SELECTOR_MAP = {
    "product_name": {"jsonld": "Product:name"},
    "sku": {"jsonld": "Product:sku"},
    "price": {"jsonld": "Product:offers.price", "post": ["price"]},
    "currency": {"jsonld": "Product:offers.priceCurrency"},
    "fallback": False,
}

NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    default_type text/html;
    keepalive_requests 100000;
    server {{
{listens}
        root {tmp}/site;
        location = /robots.txt {{ return 404; }}
    }}
}}
"""


def machine() -> dict[str, str]:
    """The machine and its load now (figures are only comparable on a quiet machine)."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown",
    )
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    pg = subprocess.run(["psql", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "memory_gib": f"{mem_kb / 1024 / 1024:.0f}",
        "python": platform.python_version(),
        "postgresql": pg or "unknown",
        "os": platform.platform(),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


# -- the site ------------------------------------------------------------------------------


def build_site(root: Path, pages: int, base_url: str) -> None:
    from tests.support.pages import product_page

    site = root / "site" / "p"
    site.mkdir(parents=True)
    for n in range(pages):
        price = Decimal(n % 500) + Decimal("0.99")
        html = product_page(n, price, True, base_url, kb=PAGE_KB)
        (site / f"{n}.html").write_text(html, encoding="utf-8")


def ensure_nginx() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else "")
    if found:
        return found
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    print("installing nginx with apt-get", file=sys.stderr)
    install = [*sudo, "apt-get", "install", "-y", "-q", "nginx"]
    if subprocess.run(install, capture_output=True).returncode != 0:
        subprocess.run([*sudo, "apt-get", "update", "-q"], capture_output=True, check=True)
        subprocess.run(install, capture_output=True, check=True)
    return shutil.which("nginx") or "/usr/sbin/nginx"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Nginx:
    """nginx in the foreground on ``port`` of every loopback host, serving ``tmp/site``."""

    def __init__(self, tmp: Path, port: int) -> None:
        listens = "\n".join(f"        listen {h}:{port};" for h in LAYOUTS["10 hosts"])
        conf = tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=tmp, listens=listens))
        for path in [tmp, *tmp.rglob("*")]:  # nginx's workers run as nobody when we are root
            path.chmod(0o755 if path.is_dir() else 0o644)
        self.proc = subprocess.Popen([ensure_nginx(), "-c", str(conf), "-p", str(tmp)])
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.10", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit(
                        f"nginx did not start: {(tmp / 'nginx-error.log').read_text()}"
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGQUIT)
        self.proc.wait(timeout=10)


# -- measuring a child -------------------------------------------------------------------------

CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class TreeCpu:
    """The CPU time of a whole process tree, orphans included, from a cgroup of its own.

    ``wait4`` counts a child and the descendants it reaped; Forager's parse processes are
    children of multiprocessing's fork server, which nobody reaps, so their CPU never reaches
    it. A cpuacct cgroup (v1, writable as root) counts every process started inside it. Where
    there is none, ``cpu_s`` stays the ``wait4`` figure and ``cpu_method`` says so.
    """

    def __init__(self, name: str) -> None:
        self.path: Path | None = CPUACCT / f"forager-bench-{os.getpid()}-{name}"
        try:
            self.path.mkdir()
        except OSError:
            self.path = None

    def join(self) -> None:
        """``preexec_fn``: the child (and all it starts) joins the group before it execs."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float | None:
        """Once every process of the tree has ended (orphans get 15 s), its CPU seconds."""
        if self.path is None:
            return None
        deadline = time.monotonic() + 15
        while (self.path / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.1)
        used = int((self.path / "cpuacct.usage").read_text()) / 1e9
        # A process that outlived the grace keeps the group; what it used is reported.
        with contextlib.suppress(OSError):
            self.path.rmdir()
        return used


def _tree_cpu(result: dict[str, Any], tree: TreeCpu) -> dict[str, Any]:
    """``result`` with ``cpu_s`` (and CPU per page) of the whole tree when it could be read."""
    cpu = tree.seconds()
    if cpu is None:
        return {**result, "cpu_method": "wait4 (no cpuacct cgroup: fork-server children missing)"}
    pages = max(result["pages"], 1)
    return {
        **result,
        "cpu_s": round(cpu, 2),
        "cpu_ms_per_page": round(cpu * 1000 / pages, 2),
        "cpu_method": "cgroup (whole process tree)",
    }


def _measured(proc: subprocess.Popen[Any], started: float) -> dict[str, float]:
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "exit": proc.returncode,
        "ended": time.perf_counter() - started,
    }


def _result(pages: int, wall: float, cpu: float, rss: float, **extra: Any) -> dict[str, Any]:
    return {
        "pages": pages,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "pages_per_s": round(pages / wall, 1),
        "cpu_ms_per_page": round(cpu * 1000 / max(pages, 1), 2),
        "peak_rss_mb": round(rss, 1),
        **extra,
    }


def forager_env(tmp: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "FORAGER_DATA_DIR": str(tmp),
        "FORAGER_DEFAULT_CRAWL_DELAY_SECONDS": "0",
        "FORAGER_DEFAULT_MAX_CONCURRENT_REQUESTS": "64",
        "FORAGER_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),  # this checkout's forager, whatever the venv has installed
        **extra,
    }


def run_scrapy(tmp: Path, urls_file: Path) -> dict[str, Any]:
    spider = tmp / "spider.py"
    spider.write_text(SPIDER)
    out = tmp / "scrapy.jsonl"
    out.unlink(missing_ok=True)
    tree = TreeCpu("scrapy")
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scrapy",
            "runspider",
            str(spider),
            "-a",
            f"urls_file={urls_file}",
            "-o",
            f"{out}:jsonl",
        ],
        cwd=tmp,
        preexec_fn=tree.join,
    )
    m = _measured(proc, started)
    pages = sum(1 for _ in out.open()) if out.exists() else 0
    return _tree_cpu(_result(pages, m["ended"], m["cpu_s"], m["peak_rss_mb"]), tree)


def run_crawl(tmp: Path, urls: list[str], *options: str) -> dict[str, Any]:
    data = tmp / "crawl-data"
    shutil.rmtree(data, ignore_errors=True)
    out = tmp / "forager.jsonl"
    out.unlink(missing_ok=True)
    tree = TreeCpu("crawl")
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "forager.cli",
            "crawl",
            "--concurrency",
            "64",
            "-o",
            str(out),
            *options,
            *urls,
        ],
        env=forager_env(data),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp,
        preexec_fn=tree.join,
    )
    m = _measured(proc, started)
    pages = sum(1 for _ in out.open()) if out.exists() else 0
    result = _result(pages, m["ended"], m["cpu_s"], m["peak_rss_mb"], exit=m["exit"])
    return _tree_cpu(result, tree)


async def _wait_done(database: str, total: int, procs: list[subprocess.Popen[Any]]) -> int:
    """Poll (one connection: the server's connection slots are shared) until all are done."""
    import asyncpg

    conn = await asyncpg.connect(database.replace("+asyncpg", ""))
    try:
        while True:
            row = await conn.fetchrow(
                "SELECT count(*) FILTER (WHERE status IN ('completed','failed','cancelled'))"
                " AS done, count(*) FILTER (WHERE status = 'completed') AS ok FROM crawl_tasks"
            )
            if row["done"] >= total or any(p.poll() is not None for p in procs):
                return int(row["ok"])
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


def run_workers(
    tmp: Path, urls_file: Path, processes: int, concurrency: int, dispatch: str = "database"
) -> dict[str, Any]:
    """``processes`` × ``forager worker`` — or, with ``dispatch="celery"``, one ``forager relay``
    and ``processes`` × ``forager celery-worker`` on the machine's RabbitMQ."""
    name = f"forager_vs_{os.getpid()}"
    asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    asyncio.run(pg_admin(f'CREATE DATABASE "{name}"'))
    database = scratch_url(name)
    data = tmp / "worker-data"
    shutil.rmtree(data, ignore_errors=True)
    env = forager_env(data, FORAGER_DATABASE_URL=database, FORAGER_POLL_SECONDS="0.2")
    celery = dispatch == "celery"
    worker = ["celery-worker" if celery else "worker", "--concurrency", str(concurrency)]
    argvs = [worker] * processes + ([["relay"]] if celery else [])
    if celery:
        env |= {
            "FORAGER_DISPATCH": "celery",
            "FORAGER_CELERY_QUEUE_PREFIX": f"forager-bench-{os.getpid()}.",
            # Room for every worker's slots and the next round of them.
            "FORAGER_CELERY_MAX_QUEUED": str(2 * processes * concurrency),
        }
    try:
        subprocess.run(
            [sys.executable, "-m", "bench.versus_scrapy", "submit", str(urls_file)],
            env=env,
            check=True,
            cwd=ROOT,
        )
        total = len(urls_file.read_text().split())
        tree = TreeCpu(f"workers-{processes}-{concurrency}")
        server = ServerCpu()
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "forager.cli", *argv],
                env=env,
                cwd=tmp,
                stderr=(tmp / f"worker{i}.log").open("wb"),
                preexec_fn=tree.join,
            )
            for i, argv in enumerate(argvs)
        ]
        try:
            ok = asyncio.run(_wait_done(database, total, procs))
            wall = time.perf_counter() - started
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            runs = [_measured(p, started) for p in procs]
        time.sleep(0.3)  # the server reaps the ended backends of the workers' connections
        server_cpu = server.seconds()
    finally:
        asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        if celery:
            _delete_queues(env["FORAGER_CELERY_QUEUE_PREFIX"])
    result = _result(
        ok,
        wall,
        sum(r["cpu_s"] for r in runs),
        max(r["peak_rss_mb"] for r in runs),
        processes=processes,
        concurrency=concurrency,
        dispatch=dispatch,
    )
    result = _tree_cpu(result, tree)
    if server_cpu is not None:  # issue 36: the worker rows count the database's CPU too
        result["pg_cpu_s"] = round(server_cpu, 2)
        result["cpu_with_pg_ms_per_page"] = round(
            (result["cpu_s"] + server_cpu) * 1000 / max(ok, 1), 2
        )
    return result


def _delete_queues(prefix: str) -> None:
    from kombu import Connection

    from forager.config import get_settings
    from forager.queue.dispatch import QUEUES

    with Connection(get_settings().celery_broker_url.get_secret_value()) as conn:
        for queue in QUEUES:
            conn.default_channel.queue_delete(prefix + queue)


def submit_main(urls_file: str) -> None:
    """Migrate the database of FORAGER_DATABASE_URL and submit the URLs (a child process)."""
    from forager.config import get_settings
    from forager.queue.submit import SubmitSpec, submit_urls
    from forager.runtime import open_database

    async def go() -> None:
        settings = get_settings()
        db = await open_database(settings)
        urls = Path(urls_file).read_text().split()
        await submit_urls(db, settings, [SubmitSpec(u, created_by="bench") for u in urls])
        await db.dispose()

    asyncio.run(go())


# -- the run -----------------------------------------------------------------------------------


def _want(name: str) -> bool:
    return not ONLY or name in ONLY


def warm_up(tmp: Path, port: int) -> None:
    """One small unmeasured run of each tool, with bytecode caching on.

    An installed program imports from compiled bytecode after its first run; this environment
    sets PYTHONDONTWRITEBYTECODE, under which every run compiles every module it imports
    again (measured here under load: 2.5 s of CPU for Forager's imports, 0.9 s for Scrapy's;
    1.0 s and 0.4 s from bytecode). The children inherit the cleared variable.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    urls = [f"http://127.0.0.1:{port}/p/{n}.html" for n in range(min(PAGES, 50))]
    urls_file = tmp / "warm-up.txt"
    urls_file.write_text("\n".join(urls))
    run_scrapy(tmp, urls_file)
    run_crawl(tmp, urls)


def require_scrapy() -> None:
    """Stop before measuring anything when the yardstick is missing: every ratio needs it."""
    if not _want("scrapy"):
        return
    try:
        import scrapy  # noqa: F401
    except ImportError:
        raise SystemExit(
            "Scrapy is not installed in this environment: run `make bench`, or "
            "`uv sync --frozen --group bench` first (make test and make lint sync without it)"
        ) from None


def main() -> None:
    require_scrapy()
    results: dict[str, Any] = {"machine_before": machine(), "pages": PAGES, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="forager-vs-") as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        build_site(tmp, PAGES, f"http://127.0.0.1:{port}")
        nginx = Nginx(tmp, port)
        selector_map = tmp / "selectors.json"
        selector_map.write_text(json.dumps(SELECTOR_MAP))
        try:
            warm_up(tmp, port)
            for layout in RUN_LAYOUTS:
                hosts = LAYOUTS[layout]
                urls = [f"http://{hosts[n % len(hosts)]}:{port}/p/{n}.html" for n in range(PAGES)]
                urls_file = tmp / "urls.txt"
                urls_file.write_text("\n".join(urls))
                runs: dict[str, Any] = results["runs"].setdefault(layout, {})
                plan: list[tuple[str, str, Any]] = [
                    ("scrapy", "scrapy", lambda f=urls_file: run_scrapy(tmp, f)),
                    ("crawl", "forager crawl (SQLite)", lambda u=urls: run_crawl(tmp, u)),
                    (
                        "crawl_map",
                        "forager crawl --selectors (SQLite, the spider's four fields)",
                        lambda u=urls: run_crawl(tmp, u, "--selectors", str(selector_map)),
                    ),
                    (
                        "worker",
                        "1 forager worker (PostgreSQL)",
                        lambda f=urls_file: run_workers(tmp, f, 1, 64),
                    ),
                    (
                        "workers",
                        "2 forager workers (PostgreSQL)",
                        lambda f=urls_file: run_workers(tmp, f, 2, 32),
                    ),
                    (
                        "workers4",
                        "4 forager workers (PostgreSQL)",
                        lambda f=urls_file: run_workers(tmp, f, 4, 16),
                    ),
                    (
                        "celery",
                        "2 Celery workers + relay (PostgreSQL, RabbitMQ)",
                        lambda f=urls_file: run_workers(tmp, f, 2, 32, dispatch="celery"),
                    ),
                ]
                if layout == "1 host":
                    plan.append(
                        (
                            "c256",
                            "1 forager worker c=256 (PostgreSQL)",
                            lambda f=urls_file: run_workers(tmp, f, 1, 256),
                        )
                    )
                samples: dict[str, list[dict[str, Any]]] = {}
                # Rounds run the tools in turn, so a drifting machine hits each alike, and each
                # ratio to Scrapy is taken within its round.
                for _ in range(ROUNDS):
                    scrapy = None
                    for key, name, run in plan:
                        if not _want(key):
                            continue
                        try:
                            result = run()
                        except Exception as exc:  # one failed run must not lose the others
                            result = {"error": repr(exc)}
                        if key == "scrapy":
                            scrapy = result.get("pages_per_s")
                        if scrapy and "pages_per_s" in result:
                            result["vs_scrapy"] = round(result["pages_per_s"] / scrapy, 2)
                        samples.setdefault(name, []).append(result)
                        runs[name] = merge_rounds(samples[name])
                        print(layout, name, json.dumps(result), file=sys.stderr)
                        save(results)
        finally:
            nginx.stop()
    results["machine_after"] = machine()
    save(results)
    print(table(results))


def merge_rounds(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for a run repeated over rounds: the round of median wall time (the slower
    middle one for an even count), with the median and range of the rounds' ratios to Scrapy."""
    done = sorted((r for r in samples if "error" not in r), key=lambda r: r["wall_s"])
    if len(samples) == 1 or not done:
        return samples[-1]
    row = {
        **done[len(done) // 2],
        "rounds": len(samples),
        "failed_rounds": len(samples) - len(done),
    }
    ratios = [r["vs_scrapy"] for r in done if "vs_scrapy" in r]
    if ratios:
        row["vs_scrapy"] = round(statistics.median(ratios), 2)
        row["vs_scrapy_range"] = [min(ratios), max(ratios)]
    return row


def save_results(name: str, results: dict[str, Any], out_env: str | None = None) -> None:
    """``results`` as ``bench/results/<name>.json`` (or in the directory ``out_env`` names)."""
    default = ROOT / "bench" / "results"
    out = Path(os.environ.get(out_env, default)) if out_env else default
    out.mkdir(exist_ok=True, parents=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")


def save(results: dict[str, Any]) -> None:
    save_results("versus_scrapy", results, "FORAGER_BENCH_VS_OUT")


def table(results: dict[str, Any]) -> str:
    lines = [
        "| layout | run | pages | wall | CPU | pages/s | CPU per page | PostgreSQL CPU | CPU per"
        " page with PostgreSQL | peak RSS | vs Scrapy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for layout, runs in results["runs"].items():
        for name, r in runs.items():
            if "error" in r:
                lines.append(f"| {layout} | {name} | failed: {r['error']} |")
                continue
            lines.append(
                f"| {layout} | {name} | {r['pages']} | {r['wall_s']} s | {r['cpu_s']} s | "
                f"{r['pages_per_s']} | {r['cpu_ms_per_page']} ms | {_with_pg(r)} | "
                f"{r['peak_rss_mb']} MB | "
                f"{r.get('vs_scrapy', '—')}×{_spread(r)} |"
            )
    return "\n".join(lines)


def _with_pg(row: dict[str, Any]) -> str:
    """The PostgreSQL server's CPU and the CPU per page with it (a worker row), else dashes."""
    if "pg_cpu_s" not in row:
        return "— | —"
    return f"{row['pg_cpu_s']} s | {row['cpu_with_pg_ms_per_page']} ms"


def _spread(row: dict[str, Any]) -> str:
    if "vs_scrapy_range" not in row:
        return ""
    low, high = row["vs_scrapy_range"]
    return f" ({low}–{high}, {row['rounds']} rounds)"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "submit":
        submit_main(sys.argv[2])
    else:
        main()
