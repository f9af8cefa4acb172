"""Parser accuracy against hand-checked truth (``../shared/pages/truth.json``), then the
Zyte benchmark's own scoring of ``zyte-bench-train`` (``forager.parse.benchmark``).

One scoring helper for ``make accuracy`` (``python -m forager.parse.accuracy``) and for
tests/parse/test_parse_real_pages.py: how a record's field is read, how it is compared with the
truth (``alternatives`` accepted too), and the per-parser, per-field tally.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from forager.errors import ParseError
from forager.parse import benchmark
from forager.parse.base import ProductRecord
from forager.parse.items import product_of
from forager.parse.registry import get_parser, parser_name_for_host

# ../shared/pages next to the checkout (forager/parse/accuracy.py -> parents[3]).
PAGES = Path(__file__).resolve().parents[3] / "shared" / "pages"
FIELDS = (
    "title",
    "price",
    "currency",
    "list_price",
    "rating",
    "review_count",
    "in_stock",
    "sku",
    "brand",
    "main_image_id",
    "image_count",
)
_IMAGE_ID = re.compile(r"/images/I/([^./]+)")


def load_truth(pages: Path = PAGES) -> list[dict[str, Any]]:
    """The truth entries, or [] when the pages folder is absent."""
    path = pages / "truth.json"
    if not path.is_file():
        return []
    data: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return data


def parser_for(entry: dict[str, Any]) -> str:
    """The parser a page's site gets by default (``amazon`` for Amazon sites)."""
    return parser_name_for_host(entry["site"])


def parse_entry(entry: dict[str, Any], pages: Path = PAGES) -> ProductRecord | ParseError:
    """The record the default parser extracts from a truth page (or the error it raised)."""
    html = (pages / entry["file"]).read_bytes().decode("utf-8", errors="replace")
    try:
        url = entry["source_url"]
        return product_of(get_parser(parser_for(entry)).parse(html, url), url)
    except ParseError as exc:
        return exc


def _norm(text: str | None) -> str | None:
    """Whitespace-normalized text for title/brand comparison (typographic quotes folded)."""
    if text is None:
        return None
    return re.sub(r"\s+", " ", text.replace("’", "'")).strip()


def _image_key(url: str) -> str:
    match = _IMAGE_ID.search(url)
    return match.group(1) if match else url


def actual(record: ProductRecord, name: str) -> Any:
    """A record's value for a truth field."""
    if name == "title":
        return _norm(record.product_name)
    if name == "price":
        return record.price
    if name == "currency":
        return record.currency
    if name == "list_price":
        return record.original_price
    if name == "rating":
        return record.rating
    if name == "review_count":
        return record.review_count
    if name == "in_stock":
        return record.is_available
    if name == "sku":
        return record.asin or record.sku
    if name == "brand":
        return _norm(record.brand)
    if name == "main_image_id":
        return record.image_urls[0] if record.image_urls else None
    if name == "image_count":
        return len({_image_key(url) for url in record.image_urls})
    raise KeyError(name)


def matches(name: str, got: Any, expected: Any) -> bool:
    """Whether ``got`` equals one truth value of field ``name``."""
    if name == "main_image_id":
        return expected is None or (got is not None and str(expected) in str(got))
    if name == "image_count":
        # Approximate by convention (+-1); a page with no gallery must give none.
        return expected is None or (int(got) >= 1 and abs(int(got) - int(expected)) <= 1)
    if name in {"price", "list_price", "rating"}:
        return bool(got == (None if expected is None else Decimal(str(expected))))
    if name in {"title", "brand"}:
        return bool(got == _norm(expected))
    return bool(got == expected)


def accepted(entry: dict[str, Any], name: str, record: ProductRecord) -> list[Any]:
    """The truth value and its alternatives for one field."""
    values = [entry.get(name), *entry.get("alternatives", {}).get(name, [])]
    if name == "review_count" and entry.get(name) is None and record.rating is None:
        values.append(0)  # "No customer reviews" may be read as zero
    return values


def field_ok(entry: dict[str, Any], name: str, record: ProductRecord | ParseError) -> bool:
    """Whether the record's field matches the truth (a parse error matches nothing)."""
    if isinstance(record, ParseError):
        return False
    got = actual(record, name)
    return any(matches(name, got, want) for want in accepted(entry, name, record))


@dataclass(slots=True)
class Tally:
    """Right / total per field for one parser, plus what was wrong."""

    right: dict[str, int] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)
    misses: list[str] = field(default_factory=list)

    def add(self, name: str, ok: bool, miss: str) -> None:
        self.total[name] = self.total.get(name, 0) + 1
        self.right[name] = self.right.get(name, 0) + int(ok)
        if not ok:
            self.misses.append(miss)

    def overall(self) -> tuple[int, int]:
        return sum(self.right.values()), sum(self.total.values())


def score(entries: Iterable[dict[str, Any]], pages: Path = PAGES) -> dict[str, Tally]:
    """Per parser name: the tally of every field of every page."""
    tallies: dict[str, Tally] = {}
    for entry in entries:
        tally = tallies.setdefault(parser_for(entry), Tally())
        record = parse_entry(entry, pages)
        for name in FIELDS:
            ok = field_ok(entry, name, record)
            got = record.message if isinstance(record, ParseError) else actual(record, name)
            tally.add(name, ok, f"{entry['file']} {name}: got {got!r}, want {entry.get(name)!r}")
    return tallies


def _pct(right: int, total: int) -> str:
    return f"{100 * right / total:5.1f} % ({right}/{total})" if total else "-"


def report(tallies: dict[str, Tally], verbose: bool = False) -> str:
    """The per-parser, per-field table (and the misses when ``verbose``)."""
    lines: list[str] = []
    every = Tally()
    for parser, tally in sorted(tallies.items()):
        lines.append(f"parser {parser}")
        for name in FIELDS:
            right, total = tally.right.get(name, 0), tally.total.get(name, 0)
            lines.append(f"  {name:<14} {_pct(right, total)}")
            every.right[name] = every.right.get(name, 0) + right
            every.total[name] = every.total.get(name, 0) + total
        lines.append(f"  {'overall':<14} {_pct(*tally.overall())}")
        if verbose:
            lines.extend(f"    miss: {miss}" for miss in tally.misses)
    lines.append("all parsers")
    for name in FIELDS:
        lines.append(f"  {name:<14} {_pct(every.right.get(name, 0), every.total.get(name, 0))}")
    lines.append(f"  {'overall':<14} {_pct(*every.overall())}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print accuracy per parser and field; ``-v`` lists every miss."""
    args = sys.argv[1:] if argv is None else argv
    pages = PAGES
    entries = load_truth(pages)
    if not entries:
        print(f"accuracy: skipped, no real pages at {pages} (truth.json missing)")
        return 0
    print(f"accuracy over {len(entries)} pages in {pages}")
    print(report(score(entries, pages), verbose="-v" in args))
    print()
    print(benchmark.report(pages, verbose="-v" in args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
