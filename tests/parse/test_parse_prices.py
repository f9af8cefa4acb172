"""Exact Decimal prices across locales, and currency detection."""

from __future__ import annotations

from decimal import Decimal

import pytest

from forager.parse.prices import detect_currency, parse_price, to_decimal


@pytest.mark.parametrize(
    ("text", "hint", "expected"),
    [
        ("R$ 1.299,90", None, "1299.90"),
        ("1.299,90", None, "1299.90"),
        ("$1,299.90", None, "1299.90"),
        ("1.299,90 €", None, "1299.90"),
        ("1 299,90 €", None, "1299.90"),
        ("1\u202f299,90", None, "1299.90"),
        ("173 34 Lei", None, "173.34"),
        ("$24.990", None, "24990"),
        ("1299.9", None, "1299.9"),
        ("R$ 303 , 05", None, "303.05"),
        ("48.99 12 items", None, "48.99"),
        ("1,299", "de-DE", "1.299"),
        ("1.299", "en-US", "1.299"),
        ("2 480 évaluations", None, "2480"),
        ("no price", None, None),
        ("", None, None),
    ],
)
def test_parse_price(text: str, hint: str | None, expected: str | None) -> None:
    want = Decimal(expected) if expected is not None else None
    assert parse_price(text, hint) == want


def test_structured_numbers_never_go_through_binary_floats() -> None:
    assert to_decimal(1299.9) == Decimal("1299.9")
    assert to_decimal("1299.90") == Decimal("1299.90")
    assert to_decimal(Decimal("4.83040000000000002700062395888380706310272216796875")) == Decimal(
        "4.8304"
    )
    assert to_decimal(None) is None


@pytest.mark.parametrize(
    ("text", "url", "expected"),
    [
        ("R$ 10,00", None, "BRL"),
        ("$10.00", None, "USD"),
        ("$10.00", "https://127.0.0.1:8443/amazon/dp/X", "USD"),
        ("$24.990", "https://www.paris.cl/p", "CLP"),
        ("£5", None, "GBP"),
        ("5,00 €", None, "EUR"),
        ("GBP 1.99", None, "GBP"),
        ("173 34 Lei", None, "RON"),
        ("12.00", None, None),
        ("502,20 б.р.", None, "BYN"),
        ("100 руб.", None, "RUB"),
        ("12 лв.", None, "BGN"),
        ("49,99 kn", None, "HRK"),
        ("NT$1,290", None, "TWD"),
        ("$1,290", "https://shop.example.tw/p/1", "TWD"),
        ("Rs 23,450", "https://www.olx.com.pk/item/1", "PKR"),
        ("Rs. 999", "https://shop.example.in/p", "INR"),
        ("Mrs 5", None, None),  # inside a word: not rupees
        ("RS-232 cable", None, None),
        ("Skn 12", None, None),
    ],
)
def test_detect_currency(text: str, url: str | None, expected: str | None) -> None:
    assert detect_currency(text, url) == expected
