"""Parser speed over the real pages in ../shared/pages: median and p95 ms per page."""

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
    for entry in json.loads(truth.read_text()):
        name = parser_name_for_host(entry["site"])
        parser = get_parser(name)
        html = (PAGES / entry["file"]).read_bytes().decode("utf-8", errors="replace")
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            with contextlib.suppress(ForagerError):  # a page that fails still costs its time
                parser.parse(html, entry["source_url"])
            best = min(best, (time.perf_counter() - started) * 1000)
        timings.setdefault(name, []).append(best)
    return {
        name: {
            "pages": len(ms),
            "median_ms": round(statistics.median(ms), 1),
            "p95_ms": round(sorted(ms)[max(0, round(0.95 * len(ms)) - 1)], 1),
        }
        for name, ms in timings.items()
    }
