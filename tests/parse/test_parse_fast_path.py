"""Complete structured data whose price the buy box shows: only the texts that may show that price
are read as prices (``visible.read``'s ``expect``); any doubt reads them all, as before."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from forager.parse import visible
from forager.parse.generic import GenericParser

URL = "https://shop.example.com/p/desk-lamp"


def _page(structured_price: str, buy_box: str) -> str:
    product = {
        "@context": "https://schema.org",
        "@type": "Product",
        "name": "Desk Lamp Pro",
        "sku": "LMP-4711",
        "offers": {
            "@type": "Offer",
            "price": structured_price,
            "priceCurrency": "USD",
            "availability": "https://schema.org/InStock",
        },
    }
    return (
        "<html><head><title>Desk Lamp Pro | Lumo</title>"
        f'<script type="application/ld+json">{json.dumps(product)}</script></head><body>'
        '<header><div class="mini-cart">Cart: $0.00</div></header>'
        f'<main><h1>Desk Lamp Pro</h1><div class="price-box">{buy_box}</div>'
        '<p class="shipping">Shipping from $4.90</p><p>Gift box $3.50</p>'
        "<p>Fits 27 mm bulbs, 60 W max.</p>"
        '<form method="post" action="/cart/add"><input name="qty" value="1">'
        '<button type="submit">Add to cart</button></form></main></body></html>'
    )


@pytest.fixture
def evidence(monkeypatch: pytest.MonkeyPatch) -> list[visible.Evidence]:
    """The visible evidence the generic parser read, page by page."""
    found: list[visible.Evidence] = []
    read = visible.read

    def spy(*args: Any, **kwargs: Any) -> visible.Evidence:
        seen = read(*args, **kwargs)
        found.append(seen)
        return seen

    monkeypatch.setattr(visible, "read", spy)
    return found


def test_an_agreeing_buy_box_is_read_for_that_price_only(evidence: list[visible.Evidence]) -> None:
    html = _page("49.00", '<span class="price">$49.00</span><span class="stock">In stock</span>')
    record = GenericParser().parse(html, URL)
    assert record.price == Decimal("49.00")
    assert record.field_confidence is not None
    [seen] = evidence
    assert seen.prices_expected
    # The gift box price was not read as a price: only the expected one was.
    assert [p.value for p in seen.prices] == [Decimal("49.00")]


def test_a_stale_structured_price_gets_the_full_readers(evidence: list[visible.Evidence]) -> None:
    html = _page("59.00", '<span class="price">$49.00</span><span class="stock">In stock</span>')
    record = GenericParser().parse(html, URL)
    assert record.price == Decimal("49.00")  # the page's price, as without the fast path
    [seen] = evidence
    assert not seen.prices_expected
    assert {p.value for p in seen.prices} >= {Decimal("49.00"), Decimal("3.50")}


def test_a_structured_price_shown_struck_gets_the_full_readers(
    evidence: list[visible.Evidence],
) -> None:
    box = '<del class="old-price">$59.00</del> <span class="price">$49.00</span>'
    record = GenericParser().parse(_page("59.00", box), URL)
    assert record.price == Decimal("49.00")
    assert record.original_price == Decimal("59.00")
    [seen] = evidence
    assert not seen.prices_expected


def test_a_price_split_in_elements_is_still_seen(evidence: list[visible.Evidence]) -> None:
    """ "<b>1</b>,299.00" holds no "299" in the text node that starts it: it is read all the
    same (its first number starts the amount), so the page is found to show the price."""
    box = '<span class="price">$<b>1</b>,299.00</span>'
    record = GenericParser().parse(_page("1299.00", box), URL)
    assert record.price == Decimal("1299.00")
    [seen] = evidence
    assert seen.prices_expected


@pytest.mark.parametrize(
    ("structured", "box"),
    [
        ("49.00", '<span class="price">$49.00</span>'),
        ("59.00", '<span class="price">$49.00</span>'),
        ("59.00", '<del class="old-price">$59.00</del> <span class="price">$49.00</span>'),
        ("49.00", '<div class="related-products"><span class="price">$49.00</span></div>'),
    ],
)
def test_the_expected_price_changes_no_record(structured: str, box: str) -> None:
    """The record is the one the full readers give (``expect`` left out)."""
    html = _page(structured, box)
    fast = GenericParser().parse(html, URL)
    with pytest.MonkeyPatch.context() as patch:
        read = visible.read
        patch.setattr(
            visible,
            "read",
            lambda *a, **k: read(*a, **{**k, "expect": None}),  # type: ignore[misc]
        )
        full = GenericParser().parse(html, URL)
    assert fast == full
