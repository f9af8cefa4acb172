"""AmazonParser on the synthetic pages the local test site serves (en-US and pt-BR)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from forager.errors import NotProductPage
from forager.parse.amazon import AmazonParser
from forager.parse.registry import get_parser

PAGE = """<html><head><title>Amazon.com: Widget Pro</title></head><body>
<div id="wayfinding-breadcrumbs_feature_div"><ul><li><a>Electronics</a></li>
<li><a>Gadgets</a></li></ul></div>
<span id="productTitle">  Widget Pro 3000  </span>
<a id="bylineInfo" href="/stores/Acme">{byline}</a>
<div id="corePrice_feature_div"><span class="a-price"><span class="a-offscreen">{price}</span>
</span></div>
<span class="a-price a-text-price" data-a-strike="true"><span class="a-offscreen">{strike}</span>
</span>
<span id="acrPopover" title="{stars}"></span>
<span id="acrCustomerReviewText">{reviews}</span>
<div id="availability"><span>{stock}</span></div>
<img id="landingImage"
 data-old-hires="https://m.media-amazon.com/images/I/71abcDEF01L._AC_SL1500_.jpg"
 data-a-dynamic-image='{{"https://m.media-amazon.com/images/I/71abcDEF01L._AC_SX300_.jpg":[300,300]}}'>
<input type="hidden" id="ASIN" value="B0TEST0001">
</body></html>"""

EN_US = {
    "byline": "Visit the Acme Store",
    "price": "$1,299.90",
    "strike": "$1,499.00",
    "stars": "4.5 out of 5 stars",
    "reviews": "1,234 ratings",
    "stock": "In Stock",
}
PT_BR = {
    "byline": "Visite a loja da Acme",
    "price": "R$ 1.299,90",
    "strike": "R$ 1.499,00",
    "stars": "4,5 de 5 estrelas",
    "reviews": "1.234 avaliações de clientes",
    "stock": "Em estoque",
}
URL = "https://127.0.0.1:8443/amazon/dp/B0TEST0001"


@pytest.mark.parametrize(("fields", "currency"), [(EN_US, "USD"), (PT_BR, "BRL")])
def test_synthetic_page(fields: dict[str, str], currency: str) -> None:
    record = AmazonParser().parse(PAGE.format(**fields), URL)
    assert record.product_name == "Widget Pro 3000"
    assert record.price == Decimal("1299.90")
    assert record.original_price == Decimal("1499.00")
    assert record.currency == currency
    assert record.rating == Decimal("4.5")
    assert record.review_count == 1234
    assert record.is_available is True
    assert record.availability == fields["stock"]
    assert record.brand == "Acme"
    assert record.asin == "B0TEST0001"
    assert record.sku == "B0TEST0001"
    assert record.category == "Electronics > Gadgets"
    assert record.image_urls == ["https://m.media-amazon.com/images/I/71abcDEF01L._AC_SL1500_.jpg"]
    assert (record.parser_name, record.parser_version) == ("amazon", AmazonParser.version)


def test_registry_serves_the_amazon_parser() -> None:
    assert isinstance(get_parser("amazon"), AmazonParser)


def test_unavailable_item_has_no_price() -> None:
    html = """<html><body><span id="productTitle">Old Widget</span>
    <div id="availability"><span>Currently unavailable.</span></div>
    <div class="a-carousel"><span class="a-price"><span class="a-offscreen">$9.99</span></span>
    </div>
    </body></html>"""
    record = AmazonParser().parse(html, "https://www.amazon.com/dp/B0TEST0002")
    assert record.price is None
    assert record.is_available is False
    assert record.currency == "USD"  # from the amazon.com host
    assert record.asin == "B0TEST0002"  # from the URL
    assert record.rating is None
    assert record.review_count is None
    assert record.brand is None
    assert record.image_urls == []


def test_classic_deal_price_beats_our_price_and_picks_the_split_price() -> None:
    html = """<html><body><div id="ppd"><span id="productTitle">Deal Widget</span>
    <div id="price"><span class="priceBlockStrikePriceString a-text-strike">88,99 €</span>
    <span id="priceblock_dealprice">66,75 €</span></div></div></body></html>"""
    record = AmazonParser().parse(html, "https://www.amazon.fr/dp/B0TEST0003")
    assert (record.price, record.original_price) == (Decimal("66.75"), Decimal("88.99"))
    assert record.currency == "EUR"


def test_price_split_into_whole_and_fraction() -> None:
    html = """<html><body><span id="productTitle">Split</span>
    <div id="corePriceDisplay_desktop_feature_div"><span class="a-price priceToPay">
    <span class="a-offscreen"> </span><span class="a-price-symbol">R$</span>
    <span class="a-price-whole">303<span class="a-price-decimal">,</span></span>
    <span class="a-price-fraction">05</span></span></div></body></html>"""
    record = AmazonParser().parse(html, "https://www.amazon.com.br/dp/B0TEST0004")
    assert (record.price, record.currency) == (Decimal("303.05"), "BRL")


@pytest.mark.parametrize(
    ("html", "says"),
    [
        ('<html><body><div data-component-type="s-search-result">x</div></body></html>', "search"),
        (
            "<html><head><title>Page Not Found</title></head><body>"
            '<img alt="Dogs of Amazon" src="/dog.jpg"></body></html>',
            "not found",
        ),
        ("<html><head><title>Amazon.com</title></head><body>Hi</body></html>", "without a product"),
    ],
)
def test_non_product_pages(html: str, says: str) -> None:
    with pytest.raises(NotProductPage, match=says):
        AmazonParser().parse(html, "https://www.amazon.com/s?k=widget")
