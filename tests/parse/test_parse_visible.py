"""Product pages without structured data, and the pages that are not product pages."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from forager.errors import NotProductPage
from forager.parse import benchmark
from forager.parse.accuracy import PAGES
from forager.parse.generic import GenericParser


def _page(body: str, title: str = "Desk Lamp Pro | Lumo") -> str:
    return f"<html><head><title>{title}</title></head><body>{body}</body></html>"


HEADER = '<header><div class="mini-cart">Cart: 0,00 €</div><nav><a href="/">Home</a></nav></header>'
RELATED = (
    '<div class="related-products"><h2>You may also like</h2>'
    + "".join(
        f'<div class="card"><a href="/p/{n}">Lamp {n}</a><span class="price">{n},00 €</span>'
        f"<button>Add to cart</button></div>"
        for n in (19, 29, 39)
    )
    + "</div>"
)
PRODUCT = _page(
    HEADER
    + '<ol class="breadcrumb"><li><a href="/">Home</a></li>'
    + '<li><a href="/lights">Lights</a></li></ol>'
    + "<h1>Desk Lamp Pro</h1>"
    + '<div class="price-box"><del class="old-price">59,90 €</del>'
    + '<span class="price">49,<sup>90</sup> €</span></div>'
    + '<p class="shipping">Shipping: 4,90 €</p>'
    + "<ul><li>Art.-Nr.: LMP-4711</li><li>EAN: 4006381333931</li></ul>"
    + '<form><input type="hidden" name="product_id" value="4711">'
    + '<button class="btn add-to-cart">In den Warenkorb</button></form>'
    + RELATED
)


def test_a_product_page_without_structured_data() -> None:
    record = GenericParser().parse(PRODUCT, "https://lumo.example/lights/desk-lamp-pro")
    assert record.product_name == "Desk Lamp Pro"
    assert (record.price, record.currency) == (Decimal("49.90"), "EUR")
    assert record.original_price == Decimal("59.90")
    assert record.sku == "LMP-4711"
    assert (record.is_available, record.availability) == (True, "InStock")
    assert record.category == "Home > Lights"
    assert record.field_confidence["price"] == pytest.approx(0.7)  # read from the visible page


def test_sold_out_product_page_without_structured_data() -> None:
    html = PRODUCT.replace(
        '<button class="btn add-to-cart">In den Warenkorb</button>',
        '<p class="availability">Leider ausverkauft</p>',
    )
    record = GenericParser().parse(html, "https://lumo.example/lights/desk-lamp-pro")
    assert (record.is_available, record.availability) == (False, "OutOfStock")


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("Šifra: 0638", "0638"),
        ("SKU: AB-12", "AB-12"),
        ("Item number 998877", "998877"),
        ("Kód produktu: X1234", "X1234"),
    ],
)
def test_item_number_labels(label: str, expected: str) -> None:
    html = _page(f"<h1>Desk Lamp Pro</h1><p class='price'>€ 49.90</p><p>{label}</p>")
    assert GenericParser().parse(html, "https://lumo.example/p/lamp").sku == expected


def test_item_number_from_the_url_and_the_cart_form() -> None:
    page = _page("<h1>Desk Lamp Pro</h1><p class='price'>€ 49.90</p><button>Buy now</button>")
    url = "https://lumo.example/desk-lamp-pro-7235216655.html"
    assert GenericParser().parse(page, url).sku == "7235216655"
    form = page.replace("</body>", '<input type="hidden" name="sku" value="DL-9">')
    assert GenericParser().parse(form, url).sku == "DL-9"


def test_structured_former_price_is_corrected_by_the_page() -> None:
    data = (
        '<script type="application/ld+json">{"@type": "Product", "name": "Desk Lamp Pro", '
        '"offers": {"price": "18.00", "priceCurrency": "EUR"}}</script>'
    )
    body = (
        "<h1>Desk Lamp Pro</h1><div class='pricing'><strong>€ <span>17,10</span></strong>"
        "<span class='barred'>€ 18,00</span> <span>-5%</span></div>"
    )
    record = GenericParser().parse(_page(data + body), "https://lumo.example/p/1")
    assert (record.price, record.original_price) == (Decimal("17.10"), Decimal("18.00"))


LISTING = _page(
    "<h1>Desk lamps</h1>"
    + "".join(
        f'<div class="product-tile"><a href="/p/{n}">Lamp {n}</a><span class="price">{n},90 €'
        f"</span><button>Add to cart</button></div>"
        for n in range(10, 22)
    ),
    title="Desk lamps | Lumo",
)


@pytest.mark.parametrize(
    ("html", "url", "why"),
    [
        (LISTING, "https://lumo.example/lights/desk-lamps", "a listing"),
        (LISTING, "https://lumo.example/search?q=lamp", "a search results page"),
        (LISTING.replace("Desk lamps", "Lamps"), "https://lumo.example/suche/lampe", "search"),
        (PRODUCT, "https://lumo.example/", "home page"),
        (
            _page("<h1>Page not found</h1><p>Try our bestseller for 9,90 €</p>", "404 | Lumo"),
            "https://lumo.example/p/gone",
            "an error page",
        ),
        (_page("<h1>About us</h1><p>Since 1990.</p>"), "https://lumo.example/about", "price"),
    ],
)
def test_pages_that_are_not_product_pages(html: str, url: str, why: str) -> None:
    with pytest.raises(NotProductPage, match=why):
        GenericParser().parse(html, url)


def _bench_page(name: str) -> tuple[str, str]:
    truth, _ = benchmark.load(PAGES)
    if name not in truth:
        pytest.skip(f"benchmark page {name} not found under {PAGES}")
    html = (benchmark.folder(PAGES) / name).read_text(encoding="utf-8", errors="replace")
    return html, truth[name]["url"]


@pytest.mark.parametrize(
    "name",
    # Dev-half pages with no schema.org data at all (one had a CAPTCHA form: not a robot check).
    ["agem-sk_bc5a68d0c2.html", "vsezaoci-si_c6ba465034.html", "vsezaoci-si_16962698dd.html"],
)
def test_real_pages_without_structured_data_are_product_pages(name: str) -> None:
    html, url = _bench_page(name)
    assert "application/ld+json" not in html or name.startswith("vsezaoci")
    record = GenericParser().parse(html, url)
    assert record.price is not None and record.is_available is True
    assert record.sku is not None


def test_pages_folder_path_is_next_to_the_checkout() -> None:
    assert PAGES.name == "pages" and isinstance(PAGES, Path)


def test_a_product_page_with_a_carousel_of_priced_tiles_is_not_a_listing() -> None:
    # Tiles whose container has no tell-tale name: eight prices after the product's own.
    tiles = "".join(
        f'<div class="slide"><a href="/p/{n}">Lamp {n}</a><span>{n},00 €</span></div>'
        for n in range(11, 19)
    )
    record = GenericParser().parse(
        _page(f"<h1>Desk Lamp Pro</h1><p><b>49,90 €</b></p><div class='slider'>{tiles}</div>"),
        "https://lumo.example/lights/desk-lamp-pro",
    )
    assert record.price == Decimal("49.90")
    # The same tiles right after a category heading are a listing.
    with pytest.raises(NotProductPage, match="a listing"):
        GenericParser().parse(
            _page(f"<h1>Desk lamps</h1><div>{tiles}</div>", title="Desk lamps | Lumo"),
            "https://lumo.example/lights/desk-lamps",
        )


def test_an_h1_unrelated_to_the_title_gives_way_to_the_product_name() -> None:
    html = _page(
        "<h1>Sale</h1><div class='product-title'>Desk Lamp Pro</div><p><b>49,90 €</b></p>"
        "<button>Add to cart</button>"
    )
    record = GenericParser().parse(html, "https://lumo.example/lights/desk-lamp-pro")
    assert (record.product_name, record.price) == ("Desk Lamp Pro", Decimal("49.90"))


def test_a_price_above_the_name_and_a_list_of_ads_before_it() -> None:
    # Classified-ads layout: other ads (link + price) above, then the ad's price, then its title.
    ads = "".join(
        f'<div><a href="/item/{n}">Phone {n}</a><span>Rs {n},000</span></div>'
        for n in range(11, 19)
    )
    html = _page(
        f"<div>{ads}</div><div><span>Rs 23,450</span></div><h1>Desk Lamp Pro</h1>"
        "<p>Ad ID: 1021493409</p>"
    )
    record = GenericParser().parse(html, "https://ads.example.pk/item/desk-lamp-pro-1021493409")
    assert (record.price, record.currency) == (Decimal("23450"), "PKR")


def test_item_code_from_the_url_when_the_page_names_it_as_an_id() -> None:
    url = "https://lumo.example/lumo-desk-lamp-pro-lu312m00l-c11.html"
    page = _page("<h1>Desk Lamp Pro</h1><p class='price'>€ 49.90</p><button>Buy now</button>")
    named = page.replace(
        "</body>", '<script>window.app = {"articleInfo": {"id": "LU312M00L-C11"}};</script></body>'
    )
    assert GenericParser().parse(named, url).sku == "LU312M00L-C11"
    longer = named.replace('"LU312M00L-C11"', '"LU312M00L-C110029000"')  # a size's id, not it
    assert GenericParser().parse(longer, url).sku is None
    assert GenericParser().parse(page, url).sku is None  # the page never names it


def test_a_listing_whose_tiles_are_links_is_a_listing() -> None:
    tiles = "".join(
        f'<li><a href="/p/{n}"><img src="/i/{n}.jpg"><h2>Lamp {n}</h2><span>{n},90 €</span></a>'
        "</li>"
        for n in range(10, 22)
    )
    with pytest.raises(NotProductPage, match="a listing"):
        GenericParser().parse(
            _page(f"<h1>Desk lamps</h1><ul>{tiles}</ul>", title="Desk lamps | Lumo"),
            "https://lumo.example/lights/desk-lamps",
        )
