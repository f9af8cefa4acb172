"""Prices on whole pages the way shops write them (issue 37): sale versus list price, net and
gross both shown, a placeholder 0, and a currency without minor units."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from forager.parse import locales
from forager.parse.base import ProductRecord
from forager.parse.generic import GenericParser
from forager.parse.prices import detect_currency

PRODUCT = {"@context": "https://schema.org", "@type": "Product", "name": "Wasserkocher"}


def _parse(body: str, data: dict[str, Any] | None = None, url: str = "") -> ProductRecord:
    script = f'<script type="application/ld+json">{json.dumps(data)}</script>' if data else ""
    html = (
        f"<html><head><title>Wasserkocher</title>{script}</head><body><h1>Wasserkocher</h1>"
        f'{body}<button class="add-to-cart">In den Warenkorb</button></body></html>'
    )
    return GenericParser().parse(html, url or "https://shop.example.de/p/wasserkocher")


def _prices(record: ProductRecord) -> tuple[Decimal | None, Decimal | None, str | None]:
    return record.price, record.original_price, record.currency


@pytest.mark.parametrize(
    "body",
    [
        '<div class="price"><del>49,99 €</del> <span class="special">39,99 €</span></div>',
        '<div class="price"><span class="special">39,99 €</span> <s>49,99 €</s></div>',
        '<div class="price"><span class="now">39,99 €</span>'
        '<span class="old-price">49,99 €</span></div>',
    ],
)
def test_the_shown_sale_price_wins_and_the_struck_one_is_the_list_price(body: str) -> None:
    assert _prices(_parse(body)) == (Decimal("39.99"), Decimal("49.99"), "EUR")


@pytest.mark.parametrize(
    ("body", "price"),
    [
        # B2C: the gross price first, the net one under it.
        (
            '<div class="price">39,99 € <small>inkl. MwSt.</small></div>'
            '<div class="price-net">33,61 € zzgl. MwSt.</div>',
            "39.99",
        ),
        # B2B: the net price first and named as the price, the gross one after it.
        (
            '<div class="price-wrap"><div><span>bez DPH</span> <span class="price">33,61 €</span>'
            '</div><div><span>s DPH</span> <span class="price">39,99 €</span></div></div>',
            "33.61",
        ),
        # The gross price named "old" by the shop's markup, with only the net one beside it.
        (
            '<ul><li class="price"><span class="price-old-live">39,99 €</span></li>'
            '<li class="price-tax small">Brez DDV: <span>33,61 €</span></li></ul>',
            "39.99",
        ),
    ],
)
def test_with_and_without_tax_the_shops_main_price_wins(body: str, price: str) -> None:
    assert _parse(body).price == Decimal(price)


def test_a_zero_price_is_a_placeholder_never_the_price() -> None:
    offer = {"price": "0.00", "priceCurrency": "EUR"}
    shown = _parse('<div class="price">39,99 €</div>', {**PRODUCT, "offers": offer})
    assert shown.price == Decimal("39.99")
    hidden = _parse("<p>Preis auf Anfrage</p>", {**PRODUCT, "offers": offer})
    assert hidden.price is None
    assert "price 0 is not positive" not in hidden.quality_issues


def test_a_chilean_price_has_no_minor_units() -> None:
    url = "https://www.example.cl/p/hervidor"
    offer = {"price": "5.000", "priceCurrency": "CLP"}
    assert _prices(_parse("", {**PRODUCT, "offers": offer}, url)) == (Decimal(5000), None, "CLP")
    assert _prices(_parse('<div class="price">$5.000</div>', None, url)) == (
        Decimal(5000),
        None,
        "CLP",
    )


def test_a_price_in_a_related_block_is_not_the_products() -> None:
    body = '<div class="price">39,99 €</div><div class="related"><div class="price">19,99 €</div>'
    assert _parse(body + "</div>").price == Decimal("39.99")


# --------------------------------------------------------------------------- the tables' cache


@pytest.fixture
def fresh_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The currency tables as a new process finds them, with a cache directory of the test's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    locales._tables.cache_clear()
    yield tmp_path / "forager"
    locales._tables.cache_clear()


def _no_build() -> Any:
    raise AssertionError("built again: the cache was not read")


def test_the_currency_tables_are_built_once_then_read_from_the_cache(
    fresh_tables: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = locales._tables()
    [kept] = fresh_tables.glob("currency-tables-*.json")
    assert "€" in json.loads(kept.read_text(encoding="utf-8"))["symbols"]
    locales._tables.cache_clear()
    monkeypatch.setattr(locales, "_build_tables", _no_build)
    read = locales._tables()
    assert read == built and list(read[0]) == list(built[0])  # the same, in the same order
    assert {"EUR", "KRW", "BRL"} <= read[1] and read[0]["₩"] == {"KRW"}


@pytest.mark.parametrize("content", ["{", "[]", '{"symbols": {}, "current": []}', '{"x": 1}'])
def test_a_broken_cache_of_the_tables_is_built_again(fresh_tables: Path, content: str) -> None:
    built = locales._tables()
    [kept] = fresh_tables.glob("currency-tables-*.json")
    kept.write_text(content, encoding="utf-8")
    locales._tables.cache_clear()
    assert locales._tables() == built
    assert locales._from_json(json.loads(kept.read_text(encoding="utf-8"))) == built


def test_the_tables_are_built_where_nothing_can_be_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_tables: Path
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # a file, not a directory
    assert "EUR" in locales._tables()[1]
    assert detect_currency("1.234,56 €", "https://shop.example.de/p/1") == "EUR"
    assert not list(tmp_path.glob("**/currency-tables-*"))
