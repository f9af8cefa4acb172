"""The accuracy report: scoring rules, the per-parser table, and the skip without pages."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from forager.parse import accuracy
from forager.parse.base import ProductRecord


def _record(**fields: object) -> ProductRecord:
    base: dict[str, object] = {"url": "https://shop.example/p", "product_name": "Lamp"}
    return ProductRecord(**{**base, **fields})  # type: ignore[arg-type]


def test_scoring_rules() -> None:
    entry = {"price": 24990, "alternatives": {"price": [24.99]}, "review_count": None}
    assert accuracy.field_ok(entry, "price", _record(price=Decimal("24990")))
    assert accuracy.field_ok(entry, "price", _record(price=Decimal("24.99")))  # alternative
    assert not accuracy.field_ok(entry, "price", _record(price=Decimal("2499")))
    assert accuracy.field_ok(entry, "review_count", _record(review_count=0))  # no reviews
    images = ["https://m.media-amazon.com/images/I/71ab._SL1500_.jpg"]
    assert accuracy.field_ok({"main_image_id": "71ab"}, "main_image_id", _record(image_urls=images))
    four = [f"https://c.example/p/{n}-zoom.jpg" for n in (111111, 222222, 333333, 444444)]
    assert accuracy.actual(_record(image_urls=four), "image_count") == 4
    amazon = [
        f"https://m.media-amazon.com/images/I/71ab._{size}_.jpg" for size in ("SL1500", "SX300")
    ]
    assert accuracy.actual(_record(image_urls=amazon), "image_count") == 1  # one Amazon image id
    assert accuracy.field_ok({"image_count": 5}, "image_count", _record(image_urls=four))
    assert not accuracy.field_ok({"image_count": 6}, "image_count", _record(image_urls=four))


def test_report_over_a_pages_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = """<html><head><script type="application/ld+json">{"@type": "Product",
      "name": "Desk Lamp", "sku": "DL-1", "image": "https://shop.example/lamp.jpg",
      "offers": {"price": "10.00", "priceCurrency": "EUR"}}</script></head>
      <body><h1>Desk Lamp</h1></body></html>"""
    (tmp_path / "lamp.html").write_text(page, encoding="utf-8")
    truth = {
        "file": "lamp.html",
        "source_url": "https://shop.example/p/lamp",
        "site": "shop.example",
        "title": "Desk Lamp",
        "price": 10.0,
        "currency": "EUR",
        "list_price": None,
        "rating": None,
        "review_count": None,
        "in_stock": True,  # offered at a price, no sold-out notice
        "sku": "DL-1",
        "brand": "Lumo",  # the page does not say: one miss
        "main_image_id": "lamp",
        "image_count": 1,
    }
    (tmp_path / "truth.json").write_text(json.dumps([truth]), encoding="utf-8")
    tallies = accuracy.score(accuracy.load_truth(tmp_path), tmp_path)
    assert list(tallies) == ["generic"]
    assert tallies["generic"].overall() == (10, 11)
    assert tallies["generic"].misses == ["lamp.html brand: got None, want 'Lumo'"]
    table = accuracy.report(tallies)
    assert "  brand            0.0 % (0/1)" in table
    assert "  overall         90.9 % (10/11)" in table


def test_without_pages_it_skips_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(accuracy, "PAGES", tmp_path / "absent")
    assert accuracy.main([]) == 0
    assert "skipped, no real pages" in capsys.readouterr().out
