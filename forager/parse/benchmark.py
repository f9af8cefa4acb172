"""Score the parsers the way the Zyte product-extraction benchmark scores extractors.

The benchmark's ``evaluate.py`` (scrapinghub/product-extraction-benchmark) counts, per page and
attribute, with at most one predicted value against a set of accepted values:

- no prediction: a false negative when the page has accepted values, else nothing;
- a prediction among the accepted values: a true positive;
- any other prediction: a false positive, and also a false negative when the page has values.

Precision is tp / (tp + fp), recall tp / (tp + fn) (both 1 when fp = fn = 0), F1 their harmonic
mean; prices are compared as decimals, sku and availability as exact strings. Availability is
"InStock" / "OutOfStock"; the benchmark says it filled empty availability with "InStock" (the
Zyte output stored here is filled, the extruct one is not). Forager is scored as it answers, and
also with that fill ("F1 filled"), for a like-for-like column.

The 40 pages of ``../shared/pages/zyte-bench-train`` are split by shop into a dev half and a
held-out half: sha256 of the shop part of the file name (before the last "_"), read as an integer,
even for dev, odd for held-out. A shop's pages stay on one side, so held-out shops are unseen.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from forager.errors import NotProductPage, ParseError
from forager.parse.base import ProductRecord
from forager.parse.items import product_of
from forager.parse.registry import get_parser, parser_name_for_host

ATTRIBUTES = ("price", "sku", "availability")
SYSTEMS = ("Zyte", "Diffbot", "extruct")
HALVES = ("dev", "held-out")


def folder(pages: Path) -> Path:
    """The benchmark pages' folder inside a pages folder."""
    return pages / "zyte-bench-train"


def half_of(file_name: str) -> str:
    """ "dev" or "held-out" for a benchmark page, by a hash of its shop (see module docstring)."""
    shop = file_name.rsplit("_", 1)[0]
    return "dev" if int(hashlib.sha256(shop.encode()).hexdigest(), 16) % 2 == 0 else "held-out"


def load(pages: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(ground truth by file, other systems' outputs by system then file); empty when absent."""
    root = folder(pages)
    truth_path, others_path = root / "ground-truth.json", root / "other-systems-output.json"
    if not truth_path.is_file():
        return {}, {}
    truth: dict[str, Any] = json.loads(truth_path.read_text(encoding="utf-8"))
    others: dict[str, dict[str, Any]] = (
        json.loads(others_path.read_text(encoding="utf-8")) if others_path.is_file() else {}
    )
    return truth, others


def predict(record: ProductRecord | ParseError) -> dict[str, str | None]:
    """A record as the benchmark's prediction: one value (or None) per attribute."""
    if isinstance(record, ParseError):
        return dict.fromkeys(ATTRIBUTES)
    stock = record.is_available
    availability = None if stock is None else ("InStock" if stock else "OutOfStock")
    return {
        "price": str(record.price) if record.price is not None else None,
        "sku": record.asin or record.sku,
        "availability": availability,
    }


# What "structured data" means for the stripped run: JSON-LD, microdata, RDFa and product meta.
_STRUCTURED_NODES = (
    'script[type="application/ld+json"], meta[property^="og:"], meta[property^="product:"],'
    ' meta[name^="og:"], meta[name^="product:"]'
)
_STRUCTURED_ATTRS = ("itemscope", "itemprop", "itemtype", "itemid", "typeof", "property", "vocab")


def without_structured_data(html: str) -> str:
    """``html`` with its JSON-LD, og: / product: meta tags and microdata / RDFa attributes removed:
    the page as a shop without structured data would serve it, to measure the visible reading."""
    tree = LexborHTMLParser(html)
    for node in tree.css(_STRUCTURED_NODES):
        node.decompose()
    for node in tree.css(", ".join(f"[{name}]" for name in _STRUCTURED_ATTRS)):
        for name in _STRUCTURED_ATTRS:
            if name in node.attributes:
                del node.attrs[name]
    return tree.html or ""


def parse_page(
    pages: Path, file_name: str, url: str, stripped: bool = False
) -> ProductRecord | ParseError:
    """The record the host's default parser extracts from one benchmark page (or its error);
    ``stripped``: from the page without its structured data."""
    html = (folder(pages) / file_name).read_bytes().decode("utf-8", errors="replace")
    if stripped:
        html = without_structured_data(html)
    host = url.split("/")[2] if "://" in url else ""
    try:
        return product_of(get_parser(parser_name_for_host(host)).parse(html, url), url)
    except ParseError as exc:
        return exc


def _decimal(value: Any) -> Decimal | None:
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None


def counts(attribute: str, accepted: list[Any], predicted: Any) -> tuple[int, int, int]:
    """(tp, fp, fn) for one page and attribute, exactly as the benchmark's hard/decimal matching."""
    true = set(accepted or [])
    pred = predicted
    if attribute == "price":
        true = {_decimal(v) for v in true} - {None}
        pred = _decimal(predicted) if predicted is not None else None
    if pred is None:
        return 0, 0, int(bool(true))
    if pred in true:
        return 1, 0, 0
    return 0, 1, int(bool(true))


@dataclass(slots=True)
class Score:
    """Summed counts for one attribute, with the benchmark's precision / recall / F1."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, found: tuple[int, int, int]) -> None:
        self.tp, self.fp, self.fn = self.tp + found[0], self.fp + found[1], self.fn + found[2]

    @property
    def precision(self) -> float:
        if self.fp == self.fn == 0:
            return 1.0
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        if self.fp == self.fn == 0:
            return 1.0
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def score_predictions(
    truth: dict[str, Any], predictions: dict[str, dict[str, Any]], files: list[str]
) -> dict[str, Score]:
    """Per attribute, the summed score of ``predictions`` over ``files``."""
    scores = {attribute: Score() for attribute in ATTRIBUTES}
    for name in files:
        for attribute in ATTRIBUTES:
            predicted = predictions.get(name, {}).get(attribute)
            scores[attribute].add(counts(attribute, truth[name].get(attribute, []), predicted))
    return scores


def filled(predictions: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Predictions with an empty availability read as "InStock", as the benchmark filled them."""
    return {
        name: {**values, "availability": values.get("availability") or "InStock"}
        for name, values in predictions.items()
    }


def forager_predictions(
    pages: Path, truth: dict[str, Any], stripped: bool = False
) -> dict[str, dict[str, str | None]]:
    """Forager's prediction for every benchmark page (``stripped``: without structured data)."""
    return {
        name: predict(record) for name, record in forager_records(pages, truth, stripped).items()
    }


def forager_records(
    pages: Path, truth: dict[str, Any], stripped: bool = False
) -> dict[str, ProductRecord | ParseError]:
    """Forager's record (or error) for every benchmark page."""
    return {name: parse_page(pages, name, entry["url"], stripped) for name, entry in truth.items()}


# The classes of misses issue 37 names, in the order a page is put in the first that fits.
MISS_CLASSES = ("not a product page", "wrong identifier", "wrong price", "no price", "no sku")


def miss_classes(
    truth: dict[str, Any], records: dict[str, ProductRecord | ParseError], files: list[str]
) -> dict[str, int]:
    """How many of ``files`` miss in each class: refused as not a product page (every field
    lost), a wrong sku, a wrong price, or none given where the page has one."""
    found = dict.fromkeys(MISS_CLASSES, 0)
    for name in files:
        record = records[name]
        if isinstance(record, NotProductPage):
            found["not a product page"] += 1
            continue
        predicted = predict(record)
        for attribute, wrong, missing in (
            ("sku", "wrong identifier", "no sku"),
            ("price", "wrong price", "no price"),
        ):
            _, fp, fn = counts(attribute, truth[name].get(attribute, []), predicted[attribute])
            if fp:
                found[wrong] += 1
            elif fn:
                found[missing] += 1
    return found


def _triple(score: Score) -> str:
    return f"{score.precision:.3f}/{score.recall:.3f}/{score.f1:.3f}".rjust(17)


def report(pages: Path, verbose: bool = False) -> str:
    """The benchmark table per half: Forager P/R/F1 per attribute next to the others' F1."""
    truth, others = load(pages)
    if not truth:
        return f"benchmark: skipped, no pages at {folder(pages)}"
    records = forager_records(pages, truth)
    ours = {name: predict(record) for name, record in records.items()}
    lines = [f"Zyte benchmark scoring over {len(truth)} pages in {folder(pages)}"]
    for half in (*HALVES, "all"):
        files = sorted(n for n in truth if half == "all" or half_of(n) == half)
        lines.append(f"{half} ({len(files)} pages)")
        lines.append(
            f"  {'attribute':<13} {'P':>6} {'R':>6} {'F1':>6}  {'F1 filled':>9}  "
            + "  ".join(f"{s + ' P/R/F1':>17}" for s in SYSTEMS)
        )
        mine = score_predictions(truth, ours, files)
        mine_filled = score_predictions(truth, filled(ours), files)
        theirs = {s: score_predictions(truth, others.get(s, {}), files) for s in SYSTEMS}
        for attribute in ATTRIBUTES:
            row = mine[attribute]
            lines.append(
                f"  {attribute:<13} {row.precision:6.3f} {row.recall:6.3f} {row.f1:6.3f}  "
                f"{mine_filled[attribute].f1:9.3f}  "
                + "  ".join(_triple(theirs[s][attribute]) for s in SYSTEMS)
            )
    stripped_records = forager_records(pages, truth, stripped=True)
    lines.append(
        "Misses by class (pages; held-out: shops never used to write a rule, counted only)"
    )
    lines.append(f"  {'pages':<18} " + "  ".join(f"{c:>18}" for c in MISS_CLASSES))
    for label, found_records in (("", records), (", stripped", stripped_records)):
        for half in (*HALVES, "all"):
            files = sorted(n for n in truth if half == "all" or half_of(n) == half)
            found = miss_classes(truth, found_records, files)
            lines.append(
                f"  {half + label:<18} " + "  ".join(f"{found[c]:>18}" for c in MISS_CLASSES)
            )
    stripped = {name: predict(record) for name, record in stripped_records.items()}
    lines.append(
        "Forager on the same pages with their structured data removed (JSON-LD, microdata, RDFa,"
        " og:/product: meta)"
    )
    lines.append(f"  {'half':<9} {'attribute':<13} {'P':>6} {'R':>6} {'F1':>6}")
    for half in (*HALVES, "all"):
        files = sorted(n for n in truth if half == "all" or half_of(n) == half)
        scores = score_predictions(truth, stripped, files)
        for attribute in ATTRIBUTES:
            row = scores[attribute]
            lines.append(
                f"  {half:<9} {attribute:<13} {row.precision:6.3f} {row.recall:6.3f} {row.f1:6.3f}"
            )
    if verbose:
        for name in sorted(truth):
            for attribute in ATTRIBUTES:
                got = ours[name][attribute]
                _, fp, fn = counts(attribute, truth[name].get(attribute, []), got)
                if fp or fn:
                    want = truth[name].get(attribute)
                    lines.append(
                        f"    miss [{half_of(name)}] {name} {attribute}: got {got!r}, want {want!r}"
                    )
    return "\n".join(lines)
