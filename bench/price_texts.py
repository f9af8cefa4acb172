"""Forager's price reading next to Zyte's ``price-parser`` on every real page (issue 37).

``python -m bench.price_texts`` (the bench dependency group holds ``price-parser``). For every
page in ../shared/pages (truth.json pages and both halves of zyte-bench-train) the texts that
Forager's visible reading takes for prices (``forager.parse.visible.read``: every short text
with a digit and a currency or a price-named element, around the heading), and the other short
texts there in which price-parser finds a currency, are read by both:
``forager.parse.prices.parse_price`` (with the currency found beside it) and
``price_parser.Price.fromstring``. It counts where they agree, and where they do not, which one
gives the page's annotated price or list price (the truth decides only on texts that show it).
Held-out pages are only counted, never printed (``-v`` lists the other disagreements).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from price_parser import Price
from selectolax.lexbor import LexborHTMLParser

from forager.parse import benchmark, visible
from forager.parse.prices import detect_currency, parse_price
from forager.parse.structured import clean, meta_content

PAGES = Path(__file__).resolve().parents[2] / "shared" / "pages"


@dataclass
class Tally:
    texts: int = 0
    agree: int = 0
    forager_right: int = 0  # they disagree and Forager's amount is the annotated one
    price_parser_right: int = 0
    neither: int = 0  # they disagree and the truth names neither (or is not on this text)
    examples: list[str] = field(default_factory=list)


def _pages() -> list[tuple[str, str, str, set[Decimal]]]:
    """(group, file, url, annotated amounts: price, list price and accepted alternatives)."""
    found: list[tuple[str, str, str, set[Decimal]]] = []
    truth = PAGES / "truth.json"
    if truth.is_file():
        for entry in json.loads(truth.read_text(encoding="utf-8")):
            values = {entry.get("price"), entry.get("list_price")}
            for key in ("price", "list_price"):
                values.update(entry.get("alternatives", {}).get(key, []))
            amounts = {Decimal(str(v)) for v in values if v is not None}
            found.append(("truth.json", entry["file"], entry["source_url"], amounts))
    ground, _ = benchmark.load(PAGES)
    for name, entry in sorted(ground.items()):
        amounts = {Decimal(str(v)) for v in entry.get("price") or []}
        group = f"zyte {benchmark.half_of(name)}"
        found.append((group, f"zyte-bench-train/{name}", entry["url"], amounts))
    return found


def _texts(html: str, url: str) -> list[tuple[str, str | None]]:
    """(price text, currency found with it) of every price Forager's visible reading sees, then
    every other short text around the heading in which price-parser finds a currency (its own
    idea of a price text), so that neither reader picks the texts it is judged on."""
    tree = LexborHTMLParser(html)
    meta = meta_content(tree)
    title = tree.css_first("title")
    references = [t for t in (meta.get("og:title"), clean(title.text()) if title else None) if t]
    seen = visible.read(tree, url, references)
    found = {p.text: p.currency for p in seen.prices}
    for _, raw in seen.window:
        text = clean(raw) or ""
        short = text not in found and len(text) <= 40 and any(c.isdigit() for c in text)
        if short and Price.fromstring(text).currency is not None:
            found[text] = detect_currency(text, url)
    return list(found.items())


def _amount_pp(text: str) -> Decimal | None:
    amount = Price.fromstring(text).amount
    return Decimal(str(amount)) if amount is not None else None


def compare() -> dict[str, Tally]:
    tallies: dict[str, Tally] = {}
    for group, file, url, amounts in _pages():
        html = (PAGES / file).read_bytes().decode("utf-8", errors="replace")
        tally = tallies.setdefault(group, Tally())
        for text, currency in _texts(html, url):
            ours, theirs = parse_price(text, currency=currency), _amount_pp(text)
            tally.texts += 1
            if ours == theirs:
                tally.agree += 1
                continue
            if ours in amounts and theirs not in amounts:
                tally.forager_right += 1
            elif theirs in amounts and ours not in amounts:
                tally.price_parser_right += 1
            else:
                tally.neither += 1
            if group != "zyte held-out":
                tally.examples.append(f"{file}: {text!r} forager {ours} price-parser {theirs}")
    return tallies


def report(tallies: dict[str, Tally], verbose: bool) -> str:
    lines = [
        f"{'pages':<16} {'texts':>6} {'agree':>6} {'forager right':>14} "
        f"{'price-parser right':>19} {'neither':>8}"
    ]
    for group, t in tallies.items():
        lines.append(
            f"{group:<16} {t.texts:>6} {t.agree:>6} {t.forager_right:>14} "
            f"{t.price_parser_right:>19} {t.neither:>8}"
        )
        if verbose:
            lines.extend(f"    {example}" for example in t.examples)
    return "\n".join(lines)


# Locale formats written here (the cases of tests/parse/test_parse_prices.py): text, the currency
# the page names, the amount a shopper reads.
LOCALE_CASES = (
    ("$5.000", "CLP", "5000"),
    ("$24.990", "CLP", "24990"),
    ("1.234,56 €", "EUR", "1234.56"),
    ("1\u00a0234,56 €", "EUR", "1234.56"),
    ("1\u202f234,56 €", "EUR", "1234.56"),
    ("12,900원", "KRW", "12900"),
    ("₩12,900", "KRW", "12900"),
    ("1 290 ₽", "RUB", "1290"),
    ("₹1,23,456.00", "INR", "123456.00"),
    ("税込 ￥1,280", "JPY", "1280"),
    ("１，２８０円", "JPY", "1280"),
    ("١٬٢٣٤٫٥٠ ر.س.", "SAR", "1234.50"),
    ("฿๑,๒๙๐", "THB", "1290"),
    ("173 34 Lei", "RON", "173.34"),
    ("$229 99", "CAD", "229.99"),
    ("R$ 1.299,90", "BRL", "1299.90"),
    ("CHF 1'299.90", "CHF", "1299.90"),
)


def locale_cases() -> str:
    ours = sum(parse_price(t, currency=c) == Decimal(want) for t, c, want in LOCALE_CASES)
    theirs = sum(_amount_pp(t) == Decimal(want) for t, _, want in LOCALE_CASES)
    wrong = [t for t, _, want in LOCALE_CASES if _amount_pp(t) != Decimal(want)]
    return (
        f"locale formats ({len(LOCALE_CASES)}): forager {ours} right, price-parser {theirs} right"
        f" (price-parser misreads {', '.join(map(repr, wrong))})"
    )


def main(argv: list[str]) -> int:
    print(locale_cases())
    if not PAGES.is_dir():
        print(f"skipped: no pages at {PAGES}")
        return 0
    print(report(compare(), "-v" in argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
