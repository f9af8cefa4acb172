"""The Zyte benchmark's scoring, replicated: counts per page, P/R/F1, the split, the report."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from forager.errors import NotProductPage, ParseError
from forager.parse import benchmark
from forager.parse.base import ProductRecord
from forager.parse.generic import GenericParser


def test_counts_follow_the_benchmark() -> None:
    assert benchmark.counts("price", ["36.99"], "36.990") == (1, 0, 0)  # decimals compare
    assert benchmark.counts("price", ["36.99"], None) == (0, 0, 1)  # missing: recall only
    assert benchmark.counts("price", ["36.99"], "37") == (0, 1, 1)  # wrong: both
    assert benchmark.counts("price", [], "37") == (0, 1, 0)  # nothing to find: precision only
    assert benchmark.counts("sku", [], None) == (0, 0, 0)
    assert benchmark.counts("sku", ["TE5-1", "7142014"], "7142014") == (1, 0, 0)
    assert benchmark.counts("availability", ["InStock"], "OutOfStock") == (0, 1, 1)


def test_precision_recall_f1() -> None:
    score = benchmark.Score()
    assert (score.precision, score.recall) == (1.0, 1.0)  # nothing predicted, nothing missed
    for found in [(1, 0, 0), (1, 0, 0), (0, 0, 1), (0, 1, 1)]:
        score.add(found)
    assert score.precision == pytest.approx(2 / 3)
    assert score.recall == pytest.approx(2 / 4)
    assert score.f1 == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert benchmark.Score(fp=2, fn=2).f1 == 0.0


def test_predictions_from_records() -> None:
    record = ProductRecord(
        url="https://s.example/p", product_name="X", price=Decimal("9.90"), sku="A1"
    )
    assert benchmark.predict(record) == {"price": "9.90", "sku": "A1", "availability": None}
    record.is_available, record.asin = False, "B0ABC12345"
    assert benchmark.predict(record)["availability"] == "OutOfStock"
    assert benchmark.predict(record)["sku"] == "B0ABC12345"
    assert benchmark.predict(NotProductPage("no")) == dict.fromkeys(benchmark.ATTRIBUTES)
    assert benchmark.filled({"a": {"availability": None}})["a"]["availability"] == "InStock"


def test_split_is_by_shop_and_deterministic() -> None:
    assert benchmark.half_of("zalando-ie_4f4a8f8ddd.html") == "dev"
    assert benchmark.half_of("zalando-ie_644a6b0286.html") == "dev"  # same shop, same half
    assert benchmark.half_of("zara-com_5c1ec210b0.html") == "held-out"
    assert benchmark.half_of("zara-com_7c789e683a.html") == "held-out"


def test_report_over_a_small_benchmark_folder(tmp_path: Path) -> None:
    root = tmp_path / "zyte-bench-train"
    root.mkdir()
    page = """<html><head><script type="application/ld+json">{"@type": "Product",
      "name": "Desk Lamp", "sku": "DL-1", "offers": {"price": "10.00", "priceCurrency": "EUR",
      "availability": "https://schema.org/InStock"}}</script></head>
      <body><h1>Desk Lamp</h1></body></html>"""
    (root / "shop-a_0000000001.html").write_text(page, encoding="utf-8")
    (root / "ground-truth.json").write_text(
        json.dumps(
            {
                "shop-a_0000000001.html": {
                    "url": "https://shop-a.example/p/lamp",
                    "price": ["10"],
                    "sku": ["DL-2"],
                    "availability": ["InStock"],
                }
            }
        ),
        encoding="utf-8",
    )
    others = {"Zyte": {"shop-a_0000000001.html": {"price": "10.0", "availability": "InStock"}}}
    (root / "other-systems-output.json").write_text(json.dumps(others), encoding="utf-8")
    text = benchmark.report(tmp_path, verbose=True)
    half = benchmark.half_of("shop-a_0000000001.html")
    assert f"{half} (1 pages)" in text
    assert "  price          1.000  1.000  1.000      1.000  1.000/1.000/1.000" in text
    assert "  sku            0.000  0.000  0.000      0.000  0.000/0.000/0.000" in text  # wrong
    assert "miss [" in text and "sku: got 'DL-1', want ['DL-2']" in text
    # Without its JSON-LD the page shows no price: the stripped rows say so.
    assert "structured data removed" in text
    assert f"  {half:<9} price          0.000  0.000  0.000" in text


def test_without_structured_data_keeps_what_a_shopper_sees() -> None:
    page = (
        '<html><head><meta property="og:type" content="product">'
        '<meta property="product:price:amount" content="10.00"><meta name="description" '
        'content="A lamp"><script type="application/ld+json">{"@type": "Product"}</script>'
        '<script>var cart = 1;</script></head><body><div itemscope itemtype="https://schema.org'
        '/Product"><h1 itemprop="name">Desk Lamp</h1><span itemprop="price" content="10">'
        '10,00 €</span></div><p vocab="https://schema.org/" typeof="Offer">'
        '<span property="price">10</span></p></body></html>'
    )
    stripped = benchmark.without_structured_data(page)
    for gone in ("og:type", "product:price", "ld+json", "itemscope", "itemprop", "typeof"):
        assert gone not in stripped
    for kept in ("Desk Lamp", "10,00 €", 'content="A lamp"', "var cart = 1;"):
        assert kept in stripped
    with pytest.raises(NotProductPage):  # nothing left says product, and no add-to-cart
        GenericParser().parse(stripped.replace("10,00 €", ""), "https://a.example/p")


def test_report_without_pages(tmp_path: Path) -> None:
    assert "skipped" in benchmark.report(tmp_path)


def test_misses_are_counted_by_class() -> None:
    truth = {
        "a_1.html": {"price": ["10"], "sku": ["A-1"]},
        "b_1.html": {"price": ["10"], "sku": ["B-1"]},
        "c_1.html": {"price": ["10"], "sku": ["C-1"]},
        "d_1.html": {"price": ["10"], "sku": ["D-1"]},
    }
    url = "https://shop.example/p"
    records: dict[str, ProductRecord | ParseError] = {
        "a_1.html": NotProductPage("refused"),
        "b_1.html": ProductRecord(url, "B", price=Decimal("12"), sku="4006381333931"),
        "c_1.html": ProductRecord(url, "C", price=None, sku="C-1"),
        "d_1.html": ProductRecord(url, "D", price=Decimal("10.00"), sku=None),
    }
    found = benchmark.miss_classes(truth, records, sorted(truth))
    assert found == {
        "not a product page": 1,
        "wrong identifier": 1,
        "wrong price": 1,
        "no price": 1,
        "no sku": 1,
    }
