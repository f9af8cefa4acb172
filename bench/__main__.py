"""``make bench``: crawl throughput and memory on SQLite and PostgreSQL, and parser speed.

Crawls the local test site (tests/support/site.py, a separate process on loopback hosts
127.0.0.1–10) with the real worker pool; each engine runs in a fresh process so its peak
RSS is its own. Results print as a table and are saved to bench/results/latest.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import parsers
from bench.pg import pg_admin, scratch_url
from tests.support.site import SiteProcess

ROOT = Path(__file__).resolve().parents[1]
PAGES = int(os.environ.get("FORAGER_BENCH_PAGES", "2000"))
CONCURRENCY = int(os.environ.get("FORAGER_BENCH_CONCURRENCY", "32"))
HOSTS = [f"127.0.0.{n}" for n in range(1, 11)]


def _machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except OSError:
        mem_kb = 0
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory_gib": f"{mem_kb / 1024 / 1024:.0f}",
        "python": platform.python_version(),
        "os": platform.platform(),
    }


def _crawl(database_url: str, urls_file: Path, processes: int = 1) -> dict[str, float]:
    """Run ``processes`` crawl processes on one database at once; pages/s over the slowest."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.crawl_run",
                "--database-url",
                database_url,
                "--urls-file",
                str(urls_file),
                "--concurrency",
                str(CONCURRENCY),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    runs = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"bench.crawl_run failed with exit code {proc.returncode}")
        runs.append(json.loads(out.strip().splitlines()[-1]))
    seconds = max(r["seconds"] for r in runs)
    return {
        "processes": processes,
        "pages": runs[0]["pages"],
        "seconds": seconds,
        "pages_per_s": round(runs[0]["pages"] / seconds, 1),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
    }


def main() -> None:
    results: dict[str, object] = {"machine": _machine(), "pages": PAGES, "concurrency": CONCURRENCY}
    with tempfile.TemporaryDirectory(prefix="forager-bench-") as tmp_name:
        tmp = Path(tmp_name)
        with SiteProcess(HOSTS) as site:
            urls = [site.url(f"/product/{n}", host=HOSTS[n % len(HOSTS)]) for n in range(PAGES)]
            urls_file = tmp / "urls.txt"
            urls_file.write_text("\n".join(urls))
            crawl: dict[str, object] = {}
            crawl["sqlite"] = _crawl(f"sqlite+aiosqlite:///{tmp / 'bench.db'}", urls_file)
            try:
                asyncio.run(pg_admin("DROP DATABASE IF EXISTS forager_bench WITH (FORCE)"))
                asyncio.run(pg_admin("CREATE DATABASE forager_bench"))
            except OSError as exc:
                crawl["postgresql"] = f"skipped: PostgreSQL unreachable ({exc})"
            else:
                database = scratch_url("forager_bench")
                crawl["postgresql"] = _crawl(database, urls_file)
                asyncio.run(pg_admin("DROP DATABASE IF EXISTS forager_bench WITH (FORCE)"))
                asyncio.run(pg_admin("CREATE DATABASE forager_bench"))
                crawl["postgresql_2_processes"] = _crawl(database, urls_file, 2)
                asyncio.run(pg_admin("DROP DATABASE IF EXISTS forager_bench WITH (FORCE)"))
            results["crawl"] = crawl
    results["parsers"] = parsers.measure() or "skipped: ../shared/pages is absent"
    print(json.dumps(results, indent=2))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
