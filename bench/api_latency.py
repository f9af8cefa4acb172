"""API latency on large tables: 1,000,000 tasks and 100,000 products, both engines.

Rows are generated inside the database (a recursive CTE), then each endpoint is called
through the real app (ASGI, authenticated) REPEAT times; p50/p95 in milliseconds are printed
as JSON. ``python -m bench.api_latency [sqlite|postgresql]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy import text

from bench.pg import scratch_database
from forager.apikeys import create_key
from forager.app import create_app
from forager.config import load_settings
from forager.queue import counts

TASKS = int(os.environ.get("FORAGER_BENCH_TASKS", "1000000"))
PRODUCTS = int(os.environ.get("FORAGER_BENCH_PRODUCTS", "100000"))
REPEAT = int(os.environ.get("FORAGER_BENCH_REPEAT", "30"))
WORDS = ["wireless", "headphones", "coffee", "grinder", "running", "shoes", "laptop", "stand"]

ENDPOINTS = [
    ("tasks: newest page", "/api/tasks?limit=50"),
    ("tasks: status filter", "/api/tasks?status=failed&limit=50"),
    ("tasks: domain filter", "/api/tasks?domain=shop7.example&limit=50"),
    ("tasks: priority range", "/api/tasks?min_priority=1&max_priority=2&limit=50"),
    ("tasks: URL text", "/api/tasks?url_contains=/p/4242&limit=50"),
    ("tasks: URL text, no match", "/api/tasks?url_contains=nowhere-to-be-found&limit=50"),
    ("tasks: stats", "/api/tasks/stats"),
    ("tasks: stats, last week", "/api/tasks/stats?since=WEEK_AGO"),
    ("tasks: detail", "/api/tasks/4242"),
    ("products: newest page", "/api/products?limit=50"),
    ("products: price range", "/api/products?min_price=10&max_price=20&limit=50"),
    ("products: ASIN", "/api/products?asin=B000004242&limit=50"),
    ("products: min rating", "/api/products?min_rating=4.5&limit=50"),
    ("products: sort by rating", "/api/products?sort=-rating&limit=50"),
    ("products: sort by rating, lowest", "/api/products?sort=rating&limit=50"),
    ("products: sort by change", "/api/products?sort=-changed&limit=50"),
    ("products: sort by change, oldest", "/api/products?sort=changed&limit=50"),
    ("products: min rating, by rating", "/api/products?min_rating=4.5&sort=-rating&limit=50"),
    ("products: search", "/api/products?q=coffee%20grinder&limit=50"),
    ("products: broad search (every product)", "/api/products?q=product&limit=50"),
    ("health (with a key)", "/health"),
    ("metrics", "/metrics"),
    ("stats summary", "/api/stats"),
]


def _fill_sql(dialect: str) -> list[str]:
    """Statements that generate the rows server-side (one dialect difference: formatting)."""
    pad = "printf('%064d', n)" if dialect == "sqlite" else "lpad(n::text, 64, '0')"
    asin = "printf('%09d', n)" if dialect == "sqlite" else "lpad(n::text, 9, '0')"
    now = "CURRENT_TIMESTAMP"
    seq = "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {N})"
    return [
        seq.format(N=100)
        + " INSERT INTO domains (domain_name, base_url, parser_name, crawl_delay_seconds,"
        " max_concurrent_requests, default_crawl_frequency_seconds, is_active, user_agent,"
        f" created_at, updated_at) SELECT 'shop' || n || '.example', 'https://shop' || n ||"
        f" '.example', 'generic', 1, 5, 86400, true, 'bench', {now}, {now} FROM seq",
        seq.format(N=TASKS)
        + " INSERT INTO crawl_tasks (domain_id, url, url_hash, status, priority, scheduled_at,"
        " retry_count, max_retries, is_recurring, crawl_frequency_seconds, recrawl_count,"
        " created_by, created_at, updated_at, started_at, completed_at)"
        " SELECT (n % 100) + 1, 'https://shop' || ((n % 100) + 1) || '.example/p/' || n,"
        f" {pad}, CASE n % 10 WHEN 0 THEN 'failed' WHEN 1 THEN 'pending' ELSE 'completed' END,"
        f" (n % 10) + 1, {now}, 0, 3, false, 86400, 0, 'bench', {now}, {now}, {now}, {now}"
        " FROM seq",
        seq.format(N=PRODUCTS)
        + " INSERT INTO products (domain_id, url, url_hash, product_name, description, price,"
        " currency, parser_name, parser_version, content_hash, last_crawled_at, created_at,"
        " updated_at, asin, rating) SELECT (n % 100) + 1,"
        " 'https://shop' || ((n % 100) + 1) || '.example/p/' || n,"
        f" {pad}, 'Product ' || n || ' ' || "
        + _word("n % 8")
        + " || ' ' || "
        + _word("(n / 8) % 8")
        + ", 'About product ' || n, (n % 5000) / 10.0, 'USD', 'generic', '1', 'x',"
        f" {now}, {now}, {now}, 'B' || {asin},"
        # a rating on four products in five (0.0-5.0), none on the fifth
        " CASE WHEN n % 5 = 0 THEN NULL ELSE (n % 51) / 10.0 END FROM seq",
    ]


def _word(index: str) -> str:
    cases = " ".join(f"WHEN {i} THEN '{w}'" for i, w in enumerate(WORDS))
    return f"(CASE {index} {cases} END)"


async def _measure(client: httpx.AsyncClient, path: str) -> dict[str, float]:
    week_ago = (datetime.now(UTC) - timedelta(days=7)).isoformat()
    path = path.replace("WEEK_AGO", quote(week_ago))
    times = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        response = await client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, round(0.95 * len(times)) - 1)], 1),
    }


async def run(database_url: str, data_dir: Path) -> dict[str, Any]:
    settings = load_settings(
        data_dir=data_dir, database_url=database_url, serve_workers=0, log_level="WARNING"
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        db = app.state.runtime.db
        started = time.perf_counter()
        async with db.engine.begin() as conn:
            for statement in _fill_sql(db.dialect):
                await conn.execute(text(statement))
            if db.dialect == "sqlite":
                await conn.execute(text("INSERT INTO products_fts(products_fts) VALUES('rebuild')"))
                await conn.execute(text("ANALYZE"))
        if db.dialect == "postgresql":
            # The steady state autovacuum keeps: statistics and the visibility map (without
            # it no count is answered from an index alone).
            async with db.engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(text("VACUUM ANALYZE"))
        fill_seconds = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        await counts.fold(db)  # the triggers' deltas of the fill; serve folds every 5 s
        fold_seconds = round(time.perf_counter() - started, 1)
        _, key = await create_key(db, "bench", "read")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://bench",
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        ) as client:
            results = {name: await _measure(client, path) for name, path in ENDPOINTS}
    return {
        "tasks": TASKS,
        "products": PRODUCTS,
        "fill_seconds": fill_seconds,
        "fold_seconds": fold_seconds,
        "load_average": os.getloadavg(),
        **results,
    }


def main() -> None:
    engines = sys.argv[1:] or ["sqlite", "postgresql"]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="forager-api-bench-") as tmp:
        if "sqlite" in engines:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
            out["sqlite"] = asyncio.run(run(url, Path(tmp)))
        if "postgresql" in engines:
            with scratch_database("forager_bench_api") as url:
                out["postgresql"] = asyncio.run(run(url, Path(tmp)))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
