"""The linear-time rewrites of issue 11 keep what the old regexes matched on ordinary text."""

from __future__ import annotations

from decimal import Decimal

import pytest

from forager.parse.classify import classify, looks_like_product
from forager.parse.generic import _text, _without_site_suffix
from forager.parse.prices import parse_price, to_decimal


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Desk Lamp | Lumo Shop", "Desk Lamp"),
        ("Desk Lamp - Lumo", "Desk Lamp"),
        ("Desk Lamp — Lumo Shop", "Desk Lamp"),
        ("Desk Lamp – X", "Desk Lamp – X"),  # 1 character after the mark: not a site name
        ("Desk Lamp | " + "L" * 41, "Desk Lamp | " + "L" * 41),  # too long for a site name
        ("Wi-Fi Router", "Wi-Fi Router"),  # a hyphen inside a word is not a separator
        ("Lamp - Lumo - Shop", "Lamp - Lumo"),  # only the last part goes
        ("| Shop", "| Shop"),
        ("Lamp |", "Lamp |"),
    ],
)
def test_site_suffix(title: str, expected: str) -> None:
    assert _without_site_suffix(title) == expected


def test_tags_are_removed_from_structured_text() -> None:
    assert _text("Lamp <b>Pro</b> &lt;i&gt;X&lt;/i&gt;") == "Lamp Pro X"
    assert _text("a < b and c > d") == "a < b and c > d"
    assert _text("<<<") == "<<<"


def test_access_denied_and_product_markers() -> None:
    assert classify("<html><title lang='en'> Access Denied </title></html>") is not None
    assert classify("<title>Forbidden</title>") is not None
    assert classify("<title>Access denied? Read our policy</title>") is None
    assert looks_like_product('{"@type" : [ "Product"]}')
    assert looks_like_product('{"@type":"https://schema.org/Product"}')
    assert not looks_like_product('{"@type": "ProductGroupX"}')


def test_price_grouping_is_read_in_one_pass() -> None:
    assert parse_price("1 299 999,90 €", "fr") == Decimal("1299999.90")
    assert parse_price("173 34") == Decimal("173.34")
    assert parse_price("12 1234") == Decimal("12")
    assert parse_price("1" + " 111" * 100_000) == Decimal("1" + "111" * 100_000)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "Infinity", Decimal("NaN")])
def test_non_finite_numbers_are_no_price(value: object) -> None:
    assert to_decimal(value) is None
