"""A crawl job beside Scrapy's CrawlSpider and SitemapSpider on one shop (issue 32).

The shop: 3,000 product pages (~15 KB, schema.org JSON-LD, as in ``bench.versus_scrapy``) under
ten categories, each a paginated listing of 24 products a page (13 pages: page numbers and
``rel=next``, and a nav of every category on each), a home page linking the categories, and a
sitemap index of three sitemaps of 1,000 products each. Written to a temp dir and served by
nginx on loopback (``bench.versus_scrapy.Nginx``). In the same run, rounds alternating:

- *rules*: Scrapy ``CrawlSpider`` (follow the listings, parse the products) against a Forager
  crawl job from the home page with the same two rules (``follow`` the listings, ``parse`` the
  products);
- *sitemap*: Scrapy ``SitemapSpider`` (``sitemap_rules`` for the products) against a Forager
  job from the sitemap index with a ``parse`` rule for the products.

Forager runs as ``forager worker`` processes (one at concurrency 64, or two at 32; PostgreSQL,
or the embedded SQLite), keeping what it always keeps (every page stored, every product
parsed and stored, the job's lineage and progress). The job is started (its row and first task
written) before the clock starts, as the spider file is written before Scrapy's. Both tools:
no crawl delay, 64 requests per domain, Scrapy's robots.txt off (nginx answers 404 to
Forager's). Wall and CPU of the whole process tree (``TreeCpu``), pages/s (every response:
listings, sitemaps and products), the products each found, and the ratio to Scrapy's pages/s
in the same round. Saved to bench/results/discovery.json.

    .venv/bin/python -m bench.discovery
    FORAGER_BENCH_DISCO_ROUNDS=3 .venv/bin/python -m bench.discovery
    FORAGER_BENCH_DISCO_ONLY=scrapy,pg1 .venv/bin/python -m bench.discovery
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.pg import pg_admin, scratch_url
from bench.versus_scrapy import (
    PAGE_KB,
    ROOT,
    Nginx,
    TreeCpu,
    _measured,
    _result,
    _tree_cpu,
    forager_env,
    free_port,
    machine,
    require_scrapy,
    save_results,
)

PRODUCTS = int(os.environ.get("FORAGER_BENCH_DISCO_PRODUCTS", "3000"))
PER_PAGE = 24
CATEGORIES = [
    "kettles",
    "toasters",
    "mugs",
    "teapots",
    "blenders",
    "grinders",
    "scales",
    "jugs",
    "pans",
    "knives",
]
SITEMAPS = 3
ROUNDS = max(1, int(os.environ.get("FORAGER_BENCH_DISCO_ROUNDS", "1")))
ONLY = set(filter(None, os.environ.get("FORAGER_BENCH_DISCO_ONLY", "").split(",")))
LISTING = r"/c/[a-z-]+/page-\d+\.html$"
PRODUCT = r"/p/\d+\.html$"

SPIDER_COMMON = """\
import json
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule, SitemapSpider

SETTINGS = {
    "CONCURRENT_REQUESTS": 64, "CONCURRENT_REQUESTS_PER_DOMAIN": 64, "DOWNLOAD_DELAY": 0,
    "ROBOTSTXT_OBEY": False, "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False,
}


def product(response):
    for text in response.css('script[type="application/ld+json"]::text').getall():
        data = json.loads(text)
        if data.get("@type") == "Product":
            offer = data.get("offers") or {}
            yield {"url": response.url, "name": data.get("name"), "sku": data.get("sku"),
                   "price": offer.get("price"), "currency": offer.get("priceCurrency")}
            return


def save_stats(spider):
    with open(spider.stats_file, "w") as out:
        json.dump(spider.crawler.stats.get_stats(), out, default=str)
"""

CRAWL_SPIDER = """\

class Shop(CrawlSpider):
    name = "shop"
    custom_settings = SETTINGS
    rules = (
        Rule(LinkExtractor(allow=LISTING)),
        Rule(LinkExtractor(allow=PRODUCT), callback="parse_item"),
    )

    def __init__(self, start, stats_file, **kw):
        self.start_urls = [start]
        self.stats_file = stats_file
        super().__init__(**kw)

    def parse_item(self, response):
        yield from product(response)

    def closed(self, reason):
        save_stats(self)
"""

SITEMAP_SPIDER = """\

class ShopMap(SitemapSpider):
    name = "shopmap"
    custom_settings = SETTINGS
    sitemap_rules = [(PRODUCT, "parse_item")]

    def __init__(self, start, stats_file, **kw):
        self.sitemap_urls = [start]
        self.stats_file = stats_file
        super().__init__(**kw)

    def parse_item(self, response):
        yield from product(response)

    def closed(self, reason):
        save_stats(self)
"""


# -- the shop ----------------------------------------------------------------------------------


def _listing(cat: str, page: int, pages: int, products: range) -> str:
    nav = "".join(f'<li><a href="/c/{c}/page-1.html">{c}</a></li>' for c in CATEGORIES)
    grid = "".join(
        f'<li class="item"><a href="/p/{n}.html"><img src="/img/{n}.jpg" alt="">'
        f'<span class="name">Test Product {n}</span></a><span class="price">'
        f"${n % 500}.99</span></li>"
        for n in products
    )
    numbers = "".join(f'<a href="/c/{cat}/page-{p}.html">{p}</a>' for p in range(1, pages + 1))
    head = f'<link rel="next" href="/c/{cat}/page-{page + 1}.html">' if page < pages else ""
    return (
        f"<!doctype html><html><head><title>{cat}, page {page}</title>{head}</head><body>"
        f'<header><a href="/">Shop</a><nav class="categories"><ul>{nav}</ul></nav></header>'
        f'<main><h1>{cat}</h1><ul class="grid">{grid}</ul>'
        f'<nav class="pages">{numbers}</nav></main>'
        '<footer><a href="/about.html">About</a></footer></body></html>'
    )


def build_shop(root: Path, base_url: str) -> dict[str, int]:
    """The shop's files under ``root/site``; returns its page counts."""
    from tests.support.pages import product_page

    site = root / "site"
    (site / "p").mkdir(parents=True)
    per_cat = -(-PRODUCTS // len(CATEGORIES))
    listings = 0
    for i, cat in enumerate(CATEGORIES):
        numbers = range(i * per_cat, min((i + 1) * per_cat, PRODUCTS))
        pages = -(-len(numbers) // PER_PAGE)
        (site / "c" / cat).mkdir(parents=True)
        for page in range(1, pages + 1):
            shown = numbers[(page - 1) * PER_PAGE : page * PER_PAGE]
            html = _listing(cat, page, pages, shown)
            (site / "c" / cat / f"page-{page}.html").write_text(html)
            listings += 1
    cats = "".join(f'<li><a href="/c/{c}/page-1.html">{c}</a></li>' for c in CATEGORIES)
    (site / "index.html").write_text(
        "<!doctype html><html><head><title>Shop</title></head><body>"
        f'<nav class="categories"><ul>{cats}</ul></nav></body></html>'
    )
    for n in range(PRODUCTS):
        price = Decimal(n % 500) + Decimal("0.99")
        html = product_page(n, price, True, base_url, kb=PAGE_KB)
        (site / "p" / f"{n}.html").write_text(html, encoding="utf-8")
    ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    head = '<?xml version="1.0" encoding="UTF-8"?>\n'
    per_map = -(-PRODUCTS // SITEMAPS)
    for k in range(SITEMAPS):
        urls = "".join(
            f"<url><loc>{base_url}/p/{n}.html</loc><lastmod>2026-11-{1 + n % 28:02d}</lastmod>"
            "</url>\n"
            for n in range(k * per_map, min((k + 1) * per_map, PRODUCTS))
        )
        (site / f"sitemap-{k}.xml").write_text(f"{head}<urlset {ns}>\n{urls}</urlset>\n")
    maps = "".join(
        f"<sitemap><loc>{base_url}/sitemap-{k}.xml</loc></sitemap>\n" for k in range(SITEMAPS)
    )
    (site / "sitemap.xml").write_text(f"{head}<sitemapindex {ns}>\n{maps}</sitemapindex>\n")
    return {"rules": 1 + listings + PRODUCTS, "sitemap": 1 + SITEMAPS + PRODUCTS}


# -- Scrapy ------------------------------------------------------------------------------------


def run_scrapy(tmp: Path, mode: str, start: str) -> dict[str, Any]:
    spider = tmp / f"shop_{mode}.py"
    body = SPIDER_COMMON + (CRAWL_SPIDER if mode == "rules" else SITEMAP_SPIDER)
    spider.write_text(body.replace("LISTING", repr(LISTING)).replace("PRODUCT", repr(PRODUCT)))
    out, stats = tmp / "scrapy.jsonl", tmp / "scrapy-stats.json"
    out.unlink(missing_ok=True)
    stats.unlink(missing_ok=True)
    tree = TreeCpu(f"scrapy-{mode}")
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scrapy",
            "runspider",
            str(spider),
            "-a",
            f"start={start}",
            "-a",
            f"stats_file={stats}",
            "-o",
            f"{out}:jsonl",
        ],
        cwd=tmp,
        preexec_fn=tree.join,
    )
    m = _measured(proc, started)
    got = json.loads(stats.read_text()) if stats.exists() else {}
    pages = int(got.get("response_received_count", 0))
    products = sum(1 for _ in out.open()) if out.exists() else 0
    result = _result(pages, m["ended"], m["cpu_s"], m["peak_rss_mb"], products=products)
    return _tree_cpu(result, tree)


# -- Forager -----------------------------------------------------------------------------------


def start_main(mode: str, start: str) -> None:
    """Migrate the database of FORAGER_DATABASE_URL and start the job (a child process)."""
    from forager.config import get_settings
    from forager.discovery.jobs import JobSpec
    from forager.discovery.jobs import start as start_job
    from forager.runtime import open_database

    rules: list[dict[str, Any]] = [{"action": "parse", "pattern": PRODUCT}]
    if mode == "rules":
        rules.insert(0, {"action": "follow", "pattern": LISTING})
    spec = JobSpec(
        name=f"bench {mode}",
        start_urls=(start,) if mode == "rules" else (),
        sitemap_urls=(start,) if mode == "sitemap" else (),
        rules=tuple(rules),
        max_pages=PRODUCTS * 2,
        created_by="bench",
    )

    async def go() -> None:
        settings = get_settings()
        db = await open_database(settings)
        await start_job(db, settings, spec)
        await db.dispose()

    asyncio.run(go())


def progress_main() -> None:
    """Print the job's progress as JSON (a child process: FORAGER_DATABASE_URL's job 1)."""
    from forager.config import get_settings
    from forager.discovery.admin import show
    from forager.runtime import open_database

    async def go() -> None:
        db = await open_database(get_settings())
        job, found = await show(db, 1)
        await db.dispose()
        fields = ("discovered", "fetched", "parsed", "products", "errors")
        print(json.dumps({f: getattr(found, f) for f in fields} | {"status": job.status}))

    asyncio.run(go())


_LEFT = "SELECT count(*) FROM crawl_tasks WHERE status NOT IN ('completed', 'failed', 'cancelled')"


async def _wait_pg(database: str, procs: list[subprocess.Popen[Any]]) -> None:
    import asyncpg

    conn = await asyncpg.connect(database.replace("+asyncpg", ""))
    try:
        while await conn.fetchval(_LEFT) and all(p.poll() is None for p in procs):
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


def _wait_sqlite(path: Path, procs: list[subprocess.Popen[Any]]) -> None:
    while all(p.poll() is None for p in procs):
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as conn:
            if not conn.execute(_LEFT).fetchone()[0]:
                return
        time.sleep(0.1)


PROFILE = os.environ.get("FORAGER_BENCH_DISCO_PROFILE", "")  # py-spy's path: profile workers


def _spy(tmp: Path, proc: subprocess.Popen[Any], name: str) -> subprocess.Popen[Any] | None:
    """With ``FORAGER_BENCH_DISCO_PROFILE``, py-spy samples the worker and its parse processes
    (collapsed stacks in bench/results/discovery-profile-NAME.txt; the figures of a profiled
    run are not comparable)."""
    if not PROFILE:
        return None
    out = ROOT / "bench" / "results" / f"discovery-profile-{name}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            PROFILE,
            "record",
            "--pid",
            str(proc.pid),
            "--subprocesses",
            "--format",
            "raw",
            "--nonblocking",
            "--rate",
            "200",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp / f"py-spy-{name}.log").open("wb"),
    )


def run_forager(
    tmp: Path, mode: str, start: str, engine: str, processes: int, concurrency: int
) -> dict[str, Any]:
    """``processes`` × ``forager worker`` crawling one job until none of its tasks is left."""
    name = f"forager_disco_{os.getpid()}"
    data = tmp / "worker-data"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir()
    extra = {"FORAGER_POLL_SECONDS": "0.2"}
    database = ""
    if engine == "postgresql":
        asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        asyncio.run(pg_admin(f'CREATE DATABASE "{name}"'))
        database = scratch_url(name)
        extra["FORAGER_DATABASE_URL"] = database
    env = forager_env(data, **extra)
    me = [sys.executable, "-m", "bench.discovery"]
    try:
        subprocess.run([*me, "start", mode, start], env=env, check=True, cwd=ROOT)
        tree = TreeCpu(f"forager-{mode}-{engine}-{processes}")
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "forager.cli", "worker", "--concurrency", str(concurrency)],
                env=env,
                cwd=tmp,
                stderr=(tmp / f"worker{i}.log").open("wb"),
                preexec_fn=tree.join,
            )
            for i in range(processes)
        ]
        spies = [
            _spy(tmp, proc, f"{mode}-{engine}-{processes}-{i}") for i, proc in enumerate(procs)
        ]
        try:
            if database:
                asyncio.run(_wait_pg(database, procs))
            else:
                _wait_sqlite(data / "forager.db", procs)
            wall = time.perf_counter() - started
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()
            runs = [_measured(p, started) for p in procs]
            for spy in filter(None, spies):
                spy.wait()
        found = json.loads(
            subprocess.run(
                [*me, "progress"], env=env, check=True, cwd=ROOT, capture_output=True, text=True
            ).stdout
        )
    finally:
        if database:
            asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    result = _result(
        found["fetched"],
        wall,
        sum(r["cpu_s"] for r in runs),
        max(r["peak_rss_mb"] for r in runs),
        products=found["products"],
        parsed=found["parsed"],
        errors=found["errors"],
        processes=processes,
        concurrency=concurrency,
    )
    return _tree_cpu(result, tree)


# -- the run -----------------------------------------------------------------------------------

# key, name, (engine, processes, concurrency) or None for Scrapy
CONTENDERS: list[tuple[str, str, tuple[str, int, int] | None]] = [
    ("scrapy", "Scrapy", None),
    ("pg1", "1 forager worker (PostgreSQL)", ("postgresql", 1, 64)),
    ("pg2", "2 forager workers (PostgreSQL)", ("postgresql", 2, 32)),
    ("sqlite1", "1 forager worker (SQLite)", ("sqlite", 1, 64)),
]


def _want(key: str) -> bool:
    return not ONLY or key in ONLY


def main() -> None:
    require_scrapy()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as bench.versus_scrapy's warm-up says
    results: dict[str, Any] = {"machine_before": machine(), "products": PRODUCTS, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="forager-disco-") as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        results["expected_pages"] = build_shop(tmp, base)
        nginx = Nginx(tmp, port)
        starts = {"rules": f"{base}/", "sitemap": f"{base}/sitemap.xml"}
        try:
            # Unmeasured: bytecode compiled, caches warm, for every contender.
            run_scrapy(tmp, "rules", starts["rules"])
            run_forager(tmp, "sitemap", starts["sitemap"], "sqlite", 1, 64)
            samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for _ in range(ROUNDS):
                for mode, start in starts.items():
                    scrapy = None
                    for key, name, how in CONTENDERS:
                        if not _want(key):
                            continue
                        try:
                            if how is None:
                                result = run_scrapy(tmp, mode, start)
                            else:
                                result = run_forager(tmp, mode, start, *how)
                        except Exception as exc:  # one failed run must not lose the others
                            result = {"error": repr(exc)}
                        if key == "scrapy":
                            scrapy = result.get("pages_per_s")
                        if scrapy and "pages_per_s" in result:
                            result["vs_scrapy"] = round(result["pages_per_s"] / scrapy, 2)
                        samples.setdefault((mode, name), []).append(result)
                        results["runs"].setdefault(mode, {})[name] = merge(samples[(mode, name)])
                        print(mode, name, json.dumps(result), file=sys.stderr)
                        save(results)
        finally:
            nginx.stop()
    results["machine_after"] = machine()
    save(results)
    print(table(results))


def merge(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The round of median wall time, with the median and range of the ratios to Scrapy."""
    done = sorted((r for r in samples if "error" not in r), key=lambda r: r["wall_s"])
    if len(samples) == 1 or not done:
        return samples[-1]
    row = {**done[len(done) // 2], "rounds": len(samples)}
    ratios = [r["vs_scrapy"] for r in done if "vs_scrapy" in r]
    if ratios:
        row["vs_scrapy"] = round(statistics.median(ratios), 2)
        row["vs_scrapy_range"] = [min(ratios), max(ratios)]
    return row


def save(results: dict[str, Any]) -> None:
    save_results("discovery", results, "FORAGER_BENCH_DISCO_OUT")


def table(results: dict[str, Any]) -> str:
    lines = [
        "| mode | run | pages | products | wall | CPU | pages/s | CPU per page | vs Scrapy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, runs in results["runs"].items():
        for name, r in runs.items():
            if "error" in r:
                lines.append(f"| {mode} | {name} | failed: {r['error']} |")
                continue
            spread = ""
            if "vs_scrapy_range" in r:
                low, high = r["vs_scrapy_range"]
                spread = f" ({low}–{high}, {r['rounds']} rounds)"
            lines.append(
                f"| {mode} | {name} | {r['pages']} | {r['products']} | {r['wall_s']} s | "
                f"{r['cpu_s']} s | {r['pages_per_s']} | {r['cpu_ms_per_page']} ms | "
                f"{r.get('vs_scrapy', '—')}×{spread} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "start":
        start_main(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2 and sys.argv[1] == "progress":
        progress_main()
    else:
        main()
