"""Parser speed over the real pages in ../shared/pages (truth.json pages and the benchmark's dev
half), and over a ~15 KB product page written here: median and p95 ms per page.

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
from forager.parse import benchmark
from forager.parse.registry import get_parser, parser_name_for_host

PAGES = Path(__file__).resolve().parents[2] / "shared" / "pages"


def _pages() -> list[tuple[str, str, str]]:
    """(group, html, url) of every page: truth.json pages, then the benchmark's dev half."""
    found: list[tuple[str, str, str]] = []
    truth = PAGES / "truth.json"
    if truth.exists():
        for entry in json.loads(truth.read_text()):
            html = (PAGES / entry["file"]).read_bytes().decode("utf-8", errors="replace")
            found.append((parser_name_for_host(entry["site"]), html, entry["source_url"]))
    ground, _ = benchmark.load(PAGES)
    for name, entry in sorted(ground.items()):
        if benchmark.half_of(name) == "dev":
            html = (benchmark.folder(PAGES) / name).read_bytes().decode("utf-8", errors="replace")
            host = entry["url"].split("/")[2]
            found.append((f"{parser_name_for_host(host)} (bench dev)", html, entry["url"]))
    return found


def _best_ms(parser_name: str, html: str, url: str, repeat: int) -> tuple[float, float]:
    """Best wall and CPU milliseconds of ``repeat`` parses."""
    parser = get_parser(parser_name)
    best = best_cpu = float("inf")
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        with contextlib.suppress(ForagerError):  # a page that fails still costs its time
            parser.parse(html, url)
        best = min(best, (time.perf_counter() - started) * 1000)
        best_cpu = min(best_cpu, (time.process_time() - started_cpu) * 1000)
    return best, best_cpu


def small_page() -> str:
    """A ~15 KB product page written here: JSON-LD, a visible price, menus and a footer."""
    menu = "".join(f'<li><a href="/c/{n}">Category {n}</a></li>' for n in range(60))
    text = "<p>" + "A sturdy desk lamp with a warm light and a steel arm. " * 150 + "</p>"
    data = (
        '{"@context": "https://schema.org", "@type": "Product", "name": "Desk Lamp Pro",'
        ' "sku": "DL-4711", "image": "https://shop.example/img/dl.jpg", "brand": "Lumo",'
        ' "offers": {"@type": "Offer", "price": "49.90", "priceCurrency": "EUR",'
        ' "availability": "https://schema.org/InStock"}}'
    )
    return (
        f'<html><head><title>Desk Lamp Pro | Lumo</title><script type="application/ld+json">'
        f"{data}</script></head><body><header><ul>{menu}</ul></header><main>"
        '<h1>Desk Lamp Pro</h1><div class="price"><span>49,90 €</span></div>'
        f'<button class="add-to-cart">Add to cart</button>{text}</main>'
        f"<footer><ul>{menu}</ul></footer></body></html>"
    )


def measure_small(repeat: int = 200) -> dict[str, float]:
    """Median and p95 of ``repeat`` generic parses of :func:`small_page` (CPU milliseconds)."""
    html = small_page()
    parser = get_parser("generic")
    cpu: list[float] = []
    for _ in range(repeat):
        started = time.process_time()
        parser.parse(html, "https://shop.example/p/desk-lamp-pro")
        cpu.append((time.process_time() - started) * 1000)
    return {
        "bytes": len(html.encode()),
        "cpu_median_ms": round(statistics.median(cpu), 2),
        "cpu_p95_ms": _p95(cpu, 2),
    }


def measure(repeat: int = 5) -> dict[str, dict[str, float]] | None:
    """Per parser (and page group): pages, median and p95 ms (best of ``repeat`` per page)."""
    pages = _pages()
    if not pages:
        return None
    timings: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for group, html, url in pages:
        best, best_cpu = _best_ms(group.split()[0], html, url, repeat)
        timings.setdefault(group, []).append(best)
        cpu.setdefault(group, []).append(best_cpu)
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


def _p95(ms: list[float], digits: int = 1) -> float:
    return round(sorted(ms)[max(0, round(0.95 * len(ms)) - 1)], digits)


if __name__ == "__main__":
    import sys

    found = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
    print(json.dumps(found, indent=2) if found else f"skipped: no pages at {PAGES}")
    print(json.dumps({"generic small page": measure_small()}, indent=2))
