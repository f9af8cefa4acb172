"""Exact Decimal prices across locales, and currency detection."""

from __future__ import annotations

from decimal import Decimal

import pytest

from forager.parse.prices import currency_for_url, detect_currency, parse_price, to_decimal


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


@pytest.mark.parametrize(
    ("text", "hint", "currency", "expected"),
    [
        ("$5.000", None, "CLP", "5000"),  # Chile: no minor units, "." groups thousands
        ("$5.000", "en", "CLP", "5000"),  # the currency wins over a page that says English
        ("$5.000", "en", None, "5.000"),
        ("1.234,56 €", None, "EUR", "1234.56"),
        ("1\u00a0234,56 €", None, "EUR", "1234.56"),  # French, no-break space
        ("1\u202f234,56 €", "fr", "EUR", "1234.56"),  # French, narrow no-break space
        ("12,900원", None, "KRW", "12900"),
        ("₩12,900", None, None, "12900"),
        ("1 290 ₽", None, None, "1290"),
        ("₹1,23,456.00", None, "INR", "123456.00"),  # Indian grouping
        ("₹1,23,456", None, "INR", "123456"),
        ("税込 ￥1,280", None, "JPY", "1280"),
        ("１，２８０円", None, "JPY", "1280"),  # full-width digits and comma
        ("١٬٢٣٤٫٥٠ ر.س.", None, "SAR", "1234.50"),  # Arabic-Indic digits and marks
        ("۱۲۵٬۰۰۰ ریال", None, None, "125000"),  # Persian digits
        ("฿๑,๒๙๐", None, None, "1290"),  # Thai digits
        ("1,299", "de-DE", None, "1.299"),  # CLDR: German writes the decimal mark as ","
        ("1,299", "ko", None, "1299"),
    ],
)
def test_parse_price_by_locale_and_currency(
    text: str, hint: str | None, currency: str | None, expected: str
) -> None:
    assert parse_price(text, hint, currency) == Decimal(expected)


def test_structured_thousands_in_a_currency_without_minor_units() -> None:
    assert to_decimal("5.000", "CLP") == Decimal("5000")
    assert to_decimal("24.990", "CLP") == Decimal("24990")
    assert to_decimal("5.000", "EUR") == Decimal("5.000")
    assert to_decimal("5.000") == Decimal("5.000")
    assert to_decimal("12.50", "CLP") == Decimal("12.50")  # not a thousands group: as written


@pytest.mark.parametrize(
    ("text", "url", "expected"),
    [
        ("₩12,900", None, "KRW"),
        ("12,900원", "https://shop.example.kr/goods/1", "KRW"),
        ("1 290 ₽", None, "RUB"),
        ("¥199.00", "https://item.example.cn/1.html", "CNY"),
        ("¥199", None, "JPY"),
        ("税込 ￥1,280", None, "JPY"),
        ("1,280円", None, "JPY"),
        ("₪ 89.90", None, "ILS"),
        ('89.90 ש"ח', None, "ILS"),
        ("฿1,290", None, "THB"),
        ("12 990 ₸", None, "KZT"),
        ("15 900 тг", None, "KZT"),
        ("٣٤٩ ر.س.\u200f", None, "SAR"),
        ("349 د.إ", None, "AED"),
        ("24,90 €", "https://shop.example.gr/p", "EUR"),
        ("299 kr", "https://shop.example.se/p", "SEK"),
        ("299 kr.", "https://shop.example.dk/p", "DKK"),
        ("299 kr", "https://shop.example.dk/p", "DKK"),
        ("299 kr", None, None),  # Swedish, Norwegian or Danish: the page does not say
        ("$ 24.990", "https://www.example.cl/p", "CLP"),
        ("AMD Ryzen 5 3600", None, None),  # a code that is also a word in shop text
        ("km 12", None, None),
    ],
)
def test_detect_currency_in_every_script(text: str, url: str | None, expected: str | None) -> None:
    assert detect_currency(text, url) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://www.amazon.co.uk/dp/1", "GBP"),
        ("https://shop.example.kr/1", "KRW"),
        ("https://shop.example.kz/1", "KZT"),
        ("https://shop.example.gr/1", "EUR"),
        ("https://shop.example.com/1", "USD"),
        ("https://shop.example.org/1", None),
    ],
)
def test_currency_for_url_by_cldr_territory(url: str, expected: str | None) -> None:
    assert currency_for_url(url) == expected
