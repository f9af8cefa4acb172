"""``/health`` (with an API key) and ``/metrics`` at 100 running monitors, both engines.

100 monitors leased by a (pretend) live process, with counters, breakers (10 open) and 2,000
scraper errors of the last hour; each endpoint is called through the real app (ASGI,
authenticated) REPEAT times after a warm-up; p50/p95 in milliseconds print as JSON.
``python -m bench.monitors_health [sqlite|postgresql]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

from bench.pg import scratch_database
from forager.apikeys import create_key
from forager.app import create_app
from forager.config import load_settings
from forager.db.models import Monitor, ScraperError
from forager.db.types import utcnow
from forager.monitors.window import PollWindows

MONITORS = int(os.environ.get("FORAGER_BENCH_MONITORS", "100"))
ERRORS = int(os.environ.get("FORAGER_BENCH_MONITOR_ERRORS", "2000"))
REPEAT = int(os.environ.get("FORAGER_BENCH_REPEAT", "100"))


def _windows(now: datetime, n: int) -> dict[str, Any]:
    """A monitor's last two minutes of polls (about 24 a minute, as at a 2.5 s interval)."""
    windows = PollWindows()
    for second in range(0, 90, 2):
        windows.record(now - timedelta(seconds=90 - second), 80 + (n * second) % 900)
    return windows.dump()


async def run(url: str, tmp: Path) -> dict[str, Any]:
    settings = load_settings(database_url=url, data_dir=tmp / "data", serve_workers=0)
    app = create_app(settings)
    out: dict[str, Any] = {}
    async with app.router.lifespan_context(app):
        db = app.state.runtime.db
        now = utcnow()
        async with db.session() as session:
            await session.execute(
                insert(Monitor),
                [
                    {
                        "url": f"https://shop{n % 10}.example/live/{n}",
                        "fetcher": "http",
                        "selector_type": "json",
                        "selectors": {"value": "value"},
                        "interval_seconds": 2.5,
                        "min_interval_seconds": 0.5,
                        "max_interval_seconds": 60.0,
                        "current_interval_seconds": 2.5,
                        "enabled": True,
                        "status": "active",
                        "health_status": "healthy",
                        "lease_owner": "bench:1:worker:x",
                        "lease_expires_at": now + timedelta(hours=1),
                        "scraper_id": f"run-{n}",
                        "run_started_at": now - timedelta(minutes=30),
                        "total_polls": 700,
                        "total_updates": 690,
                        "total_changes": 50,
                        "total_errors": 10,
                        "consecutive_errors": n % 4,
                        "restarts": 0,
                        "breaker_state": "open" if n % 10 == 0 else "closed",
                        "breaker_failures": 0,
                        "breaker_successes": 0,
                        "breaker_opened_at": now if n % 10 == 0 else None,
                        "breaker_rejections": 0,
                        "last_success_at": now - timedelta(seconds=n % 7),
                        "last_latency_ms": 100 + n,
                        "poll_windows": _windows(now, n),
                        "memory_bytes": 200 * 1024 * 1024,
                        "cpu_percent": 3.0,
                        "created_at": now,
                        "updated_at": now,
                    }
                    for n in range(MONITORS)
                ],
            )
            await session.execute(
                insert(ScraperError),
                [
                    {
                        "scraper_id": f"run-{n % MONITORS}",
                        "monitor_id": n % MONITORS + 1,
                        "timestamp": now - timedelta(seconds=(n * 3599) // ERRORS),
                        "error_type": "http_5xx",
                        "category": "network",
                        "retry_attempt": 0,
                        "resolved": n % 3 == 0,
                    }
                    for n in range(ERRORS)
                ],
            )
        key = (await create_key(db, "bench", "admin"))[1]
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://bench",
            headers={"Authorization": f"Bearer {key}"},
        ) as client:
            for name, path in (("health (with a key)", "/health"), ("metrics", "/metrics")):
                for _ in range(5):  # warm-up
                    await client.get(path)
                times = []
                for _ in range(REPEAT):
                    start = time.perf_counter()
                    response = await client.get(path)
                    times.append((time.perf_counter() - start) * 1000)
                    assert response.status_code in (200, 503), response.text
                times.sort()
                out[name] = {
                    "p50_ms": round(statistics.median(times), 1),
                    "p95_ms": round(times[int(0.95 * len(times)) - 1], 1),
                }
            body = (await client.get("/health")).json()
            out["scrapers_listed"] = len(body["scrapers"])
            out["breakers_listed"] = len(body["errors"]["circuit_breakers"])
    return out


def main() -> None:
    engines = sys.argv[1:] or ["sqlite", "postgresql"]
    out: dict[str, Any] = {"load_average": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="forager-monitors-bench-") as tmp:
        if "sqlite" in engines:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
            out["sqlite"] = asyncio.run(run(url, Path(tmp)))
        if "postgresql" in engines:
            with scratch_database("forager_bench_monitors") as url:
                out["postgresql"] = asyncio.run(run(url, Path(tmp)))
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
