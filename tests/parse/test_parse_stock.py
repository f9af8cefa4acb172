"""Stock read from the page itself: which sold-out notices count, and against what."""

from __future__ import annotations

import pytest

from forager.parse.generic import GenericParser

URL = "https://lumo.example/lights/desk-lamp-pro"


def _page(body: str, head: str = "") -> str:
    return (
        f"<html><head><title>Desk Lamp Pro | Lumo</title>{head}</head><body>"
        f"<h1>Desk Lamp Pro</h1><div class='price'>49,90 €</div>{body}</body></html>"
    )


def _json_ld(availability: str) -> str:
    return (
        '<script type="application/ld+json">{"@type": "Product", "name": "Desk Lamp Pro", '
        '"sku": "DL-1", "offers": {"price": "49.90", "priceCurrency": "EUR", '
        f'"availability": "https://schema.org/{availability}"}}}}</script>'
    )


def _stock(html: str) -> bool | None:
    return GenericParser().parse(html, URL).is_available


@pytest.mark.parametrize(
    "body",
    [
        "<p>Sold out</p>",
        "<p class='availability'>Derzeit nicht verfügbar</p>",
        "<p>Agotado</p>",
        "<p>Notify me when available</p>",
    ],
)
def test_sold_out_notices_after_the_heading(body: str) -> None:
    assert _stock(_page(body)) is False


@pytest.mark.parametrize(
    "body",
    [
        # A size or colour that is sold out: the product itself can be bought.
        "<ul class='size-list'><li>S</li><li>M <span>Sold out</span></li></ul>",
        "<div class='swatches'><label>XL</label><em>Agotado</em></div>",
        "<p>Size 44 – sold out</p>",
        "<p>Colour: Red – not available</p>",
        # About something else on the page.
        "<p>Image not available</p>",
        "<p>Reviews unavailable</p>",
        # A pre-order is an offer.
        "<p>Not available yet – pre-order now</p>",
    ],
)
def test_notices_about_a_variant_or_something_else_do_not_count(body: str) -> None:
    assert _stock(_page(body + "<p>Ships in 2 days</p>")) is True


def test_a_bare_notice_does_not_overrule_structured_in_stock() -> None:
    html = _page("<p>Sold out</p>", head=_json_ld("InStock"))
    assert _stock(html) is True
    # ... but a notice in the element that states the stock does.
    stated = _page("<p class='stock-status'>Sold out</p>", head=_json_ld("InStock"))
    assert _stock(stated) is False


def test_stale_structured_out_of_stock_gives_way_to_a_working_buy_button() -> None:
    button = "<form><button type='submit' class='add-to-cart'>Add to cart</button></form>"
    assert _stock(_page(button, head=_json_ld("OutOfStock"))) is True
    disabled = button.replace("type='submit'", "type='submit' disabled")
    assert _stock(_page(disabled, head=_json_ld("OutOfStock"))) is False
    assert _stock(_page("", head=_json_ld("OutOfStock"))) is False


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        ('<link itemprop="availability" href="https://schema.org/OutOfStock">', False),
        ('<meta itemprop="availability" content="InStock">', True),
        ('<span property="schema:availability" content="SoldOut"></span>', False),
    ],
)
def test_availability_outside_a_product_item(markup: str, expected: bool) -> None:
    assert _stock(_page(f"<div>{markup}</div>")) is expected


def test_availability_in_a_related_product_is_not_the_pages() -> None:
    related = (
        "<div class='related-products'>"
        '<link itemprop="availability" href="https://schema.org/OutOfStock"></div>'
    )
    assert _stock(_page(related)) is True


@pytest.mark.parametrize(
    ("value", "expected"), [("out of stock", False), ("in stock", True), ("available", True)]
)
def test_product_availability_meta_values(value: str, expected: bool) -> None:
    head = f'<meta property="product:availability" content="{value}">'
    assert _stock(_page("", head=head)) is expected


def test_a_bare_notice_counts_only_in_the_buy_box() -> None:
    filler = "".join(f"<p>Feature {n}</p>" for n in range(200))  # a long description
    assert _stock(_page(f"{filler}<p>Sold out</p>")) is True  # far below: about something else
    assert _stock(_page(f"<p>Sold out</p>{filler}")) is False  # next to the heading
    assert _stock(_page(f"{filler}<p class='availability'>Sold out</p>")) is False  # stated
