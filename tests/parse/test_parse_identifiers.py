"""Identifiers by role (issue 37): the article number printed for shoppers is the sku, a GTIN
(check digit valid) goes to ``gtin`` and a manufacturer part number to ``mpn``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from forager.parse.base import ProductRecord
from forager.parse.generic import GenericParser
from forager.parse.identifiers import gtin
from forager.parse.selectors import compile_map

URL = "https://shop.example.de/p/wasserkocher-1002-710"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("4006381333931", "4006381333931"),  # EAN-13
        ("4006381333932", None),  # check digit off by one
        ("036000291452", "036000291452"),  # UPC-A
        ("96385074", "96385074"),  # EAN-8
        ("10012345678902", "10012345678902"),  # GTIN-14
        ("0 12345 67890 5", "012345678905"),  # printed with spaces
        (4006381333931, "4006381333931"),  # a JSON number
        ("0000000000000", None),  # a placeholder
        ("1002/710", None),
        ("123456789", None),  # nine digits: no GTIN length
        (None, None),
    ],
)
def test_gtin_by_length_and_check_digit(value: object, expected: str | None) -> None:
    assert gtin(value) == expected


def _page(data: dict[str, Any] | None, buy_box: str) -> ProductRecord:
    ld = (
        f'<script type="application/ld+json">{json.dumps(data)}</script>'
        if data is not None
        else ""
    )
    html = (
        f"<html><head><title>Wasserkocher 1,7 l</title>{ld}</head><body>"
        f'<h1>Wasserkocher 1,7 l</h1><div class="price">39,99 €</div>{buy_box}'
        '<button class="add-to-cart">In den Warenkorb</button></body></html>'
    )
    return GenericParser().parse(html, URL)


def _product(**fields: Any) -> dict[str, Any]:
    offer = {"@type": "Offer", "price": "39.99", "priceCurrency": "EUR"}
    offer["availability"] = "https://schema.org/InStock"
    return {"@context": "https://schema.org", "@type": "Product", "name": "Wasserkocher 1,7 l"} | {
        "offers": offer,
        **fields,
    }


def test_the_printed_article_number_beats_a_gtin_in_the_sku_field() -> None:
    record = _page(_product(sku="4006381333931"), "<p>Art.-Nr. 1002/710</p>")
    assert (record.sku, record.gtin) == ("1002/710", "4006381333931")


def test_the_printed_reference_beats_a_markup_id_shown_nowhere() -> None:
    record = _page(_product(sku="88123456"), "<p>Réf. 466/7999</p>")
    assert record.sku == "466/7999"
    assert record.gtin is None  # 88123456: eight digits, but the check digit does not fit


def test_a_structured_sku_the_page_prints_stays_the_sku() -> None:
    record = _page(_product(sku="WK-17"), "<p>Artikelnummer: WK-17</p><p>Modell 2024</p>")
    assert record.sku == "WK-17"
    record = _page(_product(sku="WK-17"), "<p>Bestellnummer</p><p>WK-17</p><p>EAN: 96385074</p>")
    assert (record.sku, record.gtin) == ("WK-17", "96385074")


def test_structured_gtin_and_mpn_fill_their_fields() -> None:
    record = _page(_product(sku="WK-17", gtin13="4006381333931", mpn="XJ-1700"), "")
    assert (record.sku, record.gtin, record.mpn) == ("WK-17", "4006381333931", "XJ-1700")
    assert record.field_confidence["gtin"] == 0.9  # from JSON-LD
    bad = _page(_product(sku="WK-17", gtin13="4006381333932"), "")
    assert bad.gtin is None


def test_labelled_gtin_and_part_number_on_a_page_without_structured_data() -> None:
    record = _page(
        None,
        "<dl><dt>Artikelnummer:</dt><dd>1002/710</dd><dt>EAN:</dt><dd>4006381333931</dd>"
        "<dt>Herstellernummer:</dt><dd>XJ-1700</dd></dl>",
    )
    assert (record.sku, record.gtin, record.mpn) == ("1002/710", "4006381333931", "XJ-1700")


def test_a_labelled_ean_with_a_wrong_check_digit_is_no_gtin() -> None:
    record = _page(None, "<p>Art.-Nr. 1002/710</p><p>EAN: 4006381333932</p>")
    assert (record.sku, record.gtin) == ("1002/710", None)


def test_a_selector_map_reads_gtin_and_mpn_and_refuses_a_gtin_that_does_not_check() -> None:
    html = (
        "<html><body><h1>Wasserkocher</h1><span class=ean>EAN 4006381333931</span>"
        "<span class=bad>4006381333932</span><span class=mpn>XJ-1700</span></body></html>"
    )
    rules = {"product_name": {"css": "h1"}, "mpn": {"css": ".mpn"}}
    good = compile_map({**rules, "gtin": {"css": ".ean", "post": [{"regex": r"\d{13}"}]}})
    record = good.parse(html, URL)
    assert isinstance(record, ProductRecord)
    assert (record.gtin, record.mpn) == ("4006381333931", "XJ-1700")
    bad = compile_map({**rules, "gtin": {"css": ".bad"}}).parse(html, URL)
    assert isinstance(bad, ProductRecord)
    assert bad.gtin is None
    assert bad.quality_issues == [
        "selector:gtin: '4006381333932' is not a GTIN (8, 12, 13 or 14 digits, check digit)"
    ]
