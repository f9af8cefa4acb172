"""Parser speed over the real pages in ../shared/pages: median and p95 ms per page.

Wall time and CPU time of the parsing process are both kept (best of ``repeat`` runs per page):
on a machine shared with other work the CPU time is the steadier measure of what a parse costs.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from pathlib import Path

from forager.errors import ForagerError
from forager.parse.registry import get_parser, parser_name_for_host

PAGES = Path(__file__).resolve().parents[2] / "shared" / "pages"


def measure(repeat: int = 5) -> dict[str, dict[str, float]] | None:
    """Per parser: pages, median and p95 milliseconds (best of ``repeat`` runs per page)."""
    truth = PAGES / "truth.json"
    if not truth.exists():
        return None
    timings: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for entry in json.loads(truth.read_text()):
        name = parser_name_for_host(entry["site"])
        parser = get_parser(name)
        html = (PAGES / entry["file"]).read_bytes().decode("utf-8", errors="replace")
        best = best_cpu = float("inf")
        for _ in range(repeat):
            started, started_cpu = time.perf_counter(), time.process_time()
            with contextlib.suppress(ForagerError):  # a page that fails still costs its time
                parser.parse(html, entry["source_url"])
            best = min(best, (time.perf_counter() - started) * 1000)
            best_cpu = min(best_cpu, (time.process_time() - started_cpu) * 1000)
        timings.setdefault(name, []).append(best)
        cpu.setdefault(name, []).append(best_cpu)
    return {
        name: {
            "pages": len(ms),
            "median_ms": round(statistics.median(ms), 1),
            "p95_ms": _p95(ms),
            "cpu_median_ms": round(statistics.median(cpu[name]), 1),
            "cpu_p95_ms": _p95(cpu[name]),
        }
        for name, ms in timings.items()
    }


def _p95(ms: list[float]) -> float:
    return round(sorted(ms)[max(0, round(0.95 * len(ms)) - 1)], 1)


if __name__ == "__main__":
    import sys

    found = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
    print(json.dumps(found, indent=2) if found else f"skipped: no pages at {PAGES}")
