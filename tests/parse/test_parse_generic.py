"""GenericParser on small synthetic pages: JSON-LD with a decoy, microdata, OpenGraph only."""

from __future__ import annotations

from decimal import Decimal

import pytest

from forager.errors import NotProductPage
from forager.parse.generic import GenericParser
from forager.parse.registry import get_parser

JSON_LD_WITH_DECOY = """<html><head><title>Trail Shoe X | Shop</title>
<script type="application/ld+json">
{"@context": "https://schema.org", "@graph": [
  {"@type": "WebSite", "name": "Shop"},
  {"@type": "Product", "name": "Trail Shoe X", "sku": "TSX-1",
   "brand": {"@type": "Brand", "name": "Acme"},
   "image": ["/img/tsx-main.jpg", "https://cdn.shop.example/tsx-2.jpg", "/img/tsx-main.jpg"],
   "aggregateRating": {"@type": "AggregateRating", "ratingValue": "4.6", "reviewCount": "87"},
   "offers": {"@type": "AggregateOffer", "lowPrice": "89.90", "highPrice": "99.90",
              "priceCurrency": "EUR", "availability": "https://schema.org/InStock"}}]}
</script></head><body>
<div class="related-products"><script type="application/ld+json">
{"@context": "https://schema.org", "@type": "Product", "name": "Road Shoe Y",
 "offers": {"@type": "Offer", "price": 59.0, "priceCurrency": "EUR"}}
</script></div>
<h1>Trail Shoe X</h1></body></html>"""

MICRODATA = """<html><body>
<div itemscope itemtype="https://schema.org/Product">
  <h1 itemprop="name">Desk Lamp</h1>
  <img itemprop="image" src="//cdn.shop.example/lamp.jpg">
  <span itemprop="brand" itemscope itemtype="https://schema.org/Brand">
    <span itemprop="name">Lumo</span></span>
  <meta itemprop="sku" content="LMP-9">
  <div itemprop="offers" itemscope itemtype="https://schema.org/Offer">
    <span itemprop="price" content="1299.90">R$ 1.299,90</span>
    <del>R$ 1.499,00</del>
    <meta itemprop="priceCurrency" content="BRL">
    <link itemprop="availability" href="https://schema.org/OutOfStock">
  </div>
  <div class="recommendations">
    <div itemscope itemtype="https://schema.org/Product"><span itemprop="name">Other Lamp</span>
      <div itemprop="offers" itemscope itemtype="https://schema.org/Offer">
        <span itemprop="price" content="10.00">R$ 10,00</span></div></div>
  </div>
</div></body></html>"""

OPEN_GRAPH = """<html><head>
<meta property="og:type" content="product">
<meta property="og:title" content="Walnut Board">
<meta property="og:image" content="/images/board.jpg">
<meta property="product:price:amount" content="45.00">
<meta property="product:price:currency" content="GBP">
</head><body><p>Hello</p></body></html>"""


def test_json_ld_main_product_beats_the_related_decoy() -> None:
    record = GenericParser().parse(JSON_LD_WITH_DECOY, "https://shop.example/p/tsx")
    assert record.product_name == "Trail Shoe X"
    assert (record.price, record.currency) == (Decimal("89.90"), "EUR")
    assert record.rating == Decimal("4.6")
    assert record.review_count == 87
    assert record.brand == "Acme"
    assert record.sku == "TSX-1"
    assert (record.availability, record.is_available) == ("InStock", True)
    assert record.image_urls == [
        "https://shop.example/img/tsx-main.jpg",
        "https://cdn.shop.example/tsx-2.jpg",
    ]
    assert (record.parser_name, record.parser_version) == ("generic", GenericParser.version)


def test_microdata_product_with_struck_price() -> None:
    record = GenericParser().parse(MICRODATA, "https://shop.example.com.br/lamp")
    assert record.product_name == "Desk Lamp"
    assert (record.price, record.original_price) == (Decimal("1299.90"), Decimal("1499.00"))
    assert record.currency == "BRL"
    assert record.brand == "Lumo"
    assert record.sku == "LMP-9"
    assert record.is_available is False
    assert record.image_urls == ["https://cdn.shop.example/lamp.jpg"]


def test_open_graph_only_page() -> None:
    record = GenericParser().parse(OPEN_GRAPH, "https://shop.example/board")
    assert record.product_name == "Walnut Board"
    assert (record.price, record.currency) == (Decimal("45.00"), "GBP")
    assert record.image_urls == ["https://shop.example/images/board.jpg"]
    assert record.rating is None
    assert record.is_available is True  # offered at a price, nothing says sold out


def test_article_with_og_title_is_not_a_product() -> None:
    html = '<html><head><meta property="og:title" content="Blog post"></head></html>'
    with pytest.raises(NotProductPage, match="not a product page"):
        GenericParser().parse(html, "https://shop.example/blog/1")


def test_registry_serves_the_generic_parser() -> None:
    assert isinstance(get_parser("generic"), GenericParser)
