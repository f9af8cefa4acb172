"""Focused extraction cases on small inline pages: structured-data shapes, shop-neutral
fallbacks, locale prices, Amazon layouts, and the validation rules every record goes through."""

from __future__ import annotations

from decimal import Decimal

import pytest

from forager.errors import CaptchaPage, NotProductPage
from forager.parse.amazon import AmazonParser
from forager.parse.base import ProductRecord
from forager.parse.generic import GenericParser
from forager.parse.prices import detect_currency, parse_price
from forager.parse.quality import validate
from forager.parse.structured import distinct_images, image_key

URL = "https://shop.example/p/lamp-123456"


def _generic(html: str, url: str = URL) -> ProductRecord:
    return GenericParser().parse(html, url)


def _ld(json_text: str, body: str = "<h1>Desk Lamp</h1>") -> str:
    return (
        '<html><head><script type="application/ld+json">'
        f"{json_text}</script></head><body>{body}</body></html>"
    )


# -- generic: structured data shapes ---------------------------------------------------------


def test_json_ld_graph_with_price_specification_list_price() -> None:
    record = _generic(
        _ld(
            """{"@context": "https://schema.org", "@graph": [
              {"@type": "BreadcrumbList", "itemListElement": []},
              {"@type": "Product", "name": "Desk Lamp", "sku": "DL-1",
               "offers": {"@type": "Offer", "priceCurrency": "EUR",
                 "availability": "https://schema.org/InStock",
                 "priceSpecification": [
                   {"@type": "UnitPriceSpecification", "price": 79.9},
                   {"@type": "UnitPriceSpecification", "priceType":
                    "https://schema.org/StrikethroughPrice", "price": 99.9}]}}]}"""
        )
    )
    assert (record.price, record.original_price, record.currency) == (
        Decimal("79.9"),
        Decimal("99.9"),
        "EUR",
    )
    assert (record.sku, record.is_available) == ("DL-1", True)
    assert record.field_confidence["price"] == pytest.approx(0.9)


def test_json_ld_top_level_array_and_aggregate_offer_with_nested_offers() -> None:
    record = _generic(
        _ld(
            """[{"@type": "WebSite", "name": "Shop"},
               {"@type": "Product", "name": "Desk Lamp",
                "offers": {"@type": "AggregateOffer", "priceCurrency": "BRL",
                  "lowPrice": "149.90", "highPrice": "199.90",
                  "offers": [{"@type": "Offer", "price": "149.90"},
                             {"@type": "Offer", "price": "149.90"},
                             {"@type": "Offer", "price": "199.90"}]}}]"""
        )
    )
    assert (record.price, record.currency) == (Decimal("149.90"), "BRL")


def test_main_product_is_the_one_named_like_the_heading_not_the_first() -> None:
    html = _ld(
        """[{"@type": "Product", "name": "Lamp Shade", "offers": {"price": 9.5,
             "priceCurrency": "USD"}},
           {"@type": "Product", "name": "Desk Lamp", "offers": {"price": 49,
             "priceCurrency": "USD"},
            "isRelatedTo": {"@type": "Product", "name": "Desk Lamp Bulb",
             "offers": {"price": 3, "priceCurrency": "USD"}}}]"""
    )
    record = _generic(html)
    assert (record.product_name, record.price) == ("Desk Lamp", Decimal("49"))


def test_microdata_main_product_beats_recommendation_decoys() -> None:
    html = """<html><body>
    <div class="recommendations"><div itemscope itemtype="https://schema.org/Product">
      <span itemprop="name">Other Lamp</span>
      <div itemprop="offers" itemscope itemtype="https://schema.org/Offer">
        <meta itemprop="price" content="12.00"><meta itemprop="priceCurrency" content="GBP">
      </div></div></div>
    <div itemscope itemtype="http://schema.org/Product">
      <h1 itemprop="name">Desk Lamp</h1>
      <div itemprop="offers" itemscope itemtype="http://schema.org/Offer">
        <span itemprop="price" content="39.99">£39.99</span> <s>£59.99</s>
        <meta itemprop="priceCurrency" content="GBP">
        <link itemprop="availability" href="http://schema.org/OutOfStock">
      </div></div></body></html>"""
    record = _generic(html)
    assert (record.price, record.original_price) == (Decimal("39.99"), Decimal("59.99"))
    assert (record.currency, record.is_available) == ("GBP", False)
    assert record.field_confidence["price"] == pytest.approx(0.85)  # microdata


def test_rdfa_product() -> None:
    html = """<html><body vocab="https://schema.org/">
    <div typeof="Product">
      <h1 property="name">Desk Lamp</h1>
      <span property="brand" typeof="Brand"><span property="name">Lumo</span></span>
      <div property="aggregateRating" typeof="AggregateRating">
        <span property="ratingValue">4.4</span> (<span property="reviewCount">31</span>)</div>
      <div property="offers" typeof="Offer">
        <span property="price" content="1299.90">R$ 1.299,90</span>
        <meta property="priceCurrency" content="BRL"></div>
    </div></body></html>"""
    record = _generic(html)
    assert (record.price, record.currency, record.brand) == (Decimal("1299.90"), "BRL", "Lumo")
    assert (record.rating, record.review_count) == (Decimal("4.4"), 31)
    assert record.field_confidence["brand"] == pytest.approx(0.85)  # RDFa


def test_open_graph_and_meta_tags_when_there_is_no_schema_org() -> None:
    html = """<html><head>
    <meta property="og:type" content="product">
    <meta property="og:title" content="Desk Lamp | Shop">
    <meta property="og:image" content="/img/lamp.jpg">
    <meta property="product:price:amount" content="24.50">
    <meta property="product:price:currency" content="EUR">
    <meta property="product:availability" content="in stock">
    </head><body><h1>Desk Lamp</h1></body></html>"""
    record = _generic(html)
    assert (record.product_name, record.price, record.currency) == (
        "Desk Lamp",
        Decimal("24.50"),
        "EUR",
    )
    assert (record.is_available, record.image_urls) == (True, ["https://shop.example/img/lamp.jpg"])
    assert record.field_confidence["price"] == pytest.approx(0.75)  # meta tags


def test_shipping_and_installment_prices_are_never_the_price() -> None:
    html = _ld(
        """{"@type": "Product", "name": "Desk Lamp", "offers": {"@type": "Offer",
            "price": "199.90", "priceCurrency": "BRL",
            "shippingDetails": {"@type": "OfferShippingDetails",
              "shippingRate": {"@type": "MonetaryAmount", "value": 20, "currency": "BRL"}}}}""",
        body="""<h1>Desk Lamp</h1><div class="buy-box">
        <p>Frete: R$ 220,00</p><p>ou 10x de R$ 219,90 sem juros</p>
        <p class="price">R$ 199,90</p></div>""",
    )
    record = _generic(html)
    assert (record.price, record.original_price) == (Decimal("199.90"), None)


def test_no_product_data_is_not_a_product_page() -> None:
    with pytest.raises(NotProductPage, match="not a product page"):
        _generic("<html><head><title>Blog</title></head><body><h1>Hi</h1></body></html>")


# -- generic: signals every shop shares -------------------------------------------------------


def test_gallery_is_the_images_named_after_the_product_one_per_picture() -> None:
    html = _ld(
        """{"@type": "Product", "name": "Desk Lamp", "image": "/img/123456-1-zoom.jpg",
            "offers": {"price": 10, "priceCurrency": "EUR"}}""",
        body="""<h1>Desk Lamp</h1>
        <img src="/img/logo.png" alt="Shop">
        <img src="/img/123456-1-zoom.jpg" alt="Desk Lamp">
        <img data-src="/img/123456-2-zoom.jpg" src="data:image/gif;base64,R0" alt="Desk Lamp">
        <img src="/img/123456-1-thumb.jpg" alt="Desk Lamp - image 1">
        <img src="/img/123456-2-thumb.jpg" alt="Desk Lamp - image 2">
        <img src="/img/999999-1-thumb.jpg" alt="Garden Chair">""",
    )
    record = _generic(html)
    assert record.image_urls == [
        "https://shop.example/img/123456-1-zoom.jpg",
        "https://shop.example/img/123456-2-zoom.jpg",
    ]


def test_image_identity_ignores_renditions() -> None:
    assert image_key("https://c.example/i/500x500/123456.jpg") == image_key(
        "https://c.example/i/100x100/123456.jpg"
    )
    assert image_key("https://c.example/p/l_10206131_001.jpg") != image_key(
        "https://c.example/p/l_10206131_002.jpg"
    )
    assert distinct_images(
        [
            "https://c.example/a/s-l300.jpg",
            "https://c.example/a/s-l64.jpg",
            "https://i.ytimg.com/vi/x/default.jpg",
        ]
    ) == ["https://c.example/a/s-l300.jpg"]


def test_stock_from_an_add_to_cart_button_when_the_data_says_nothing() -> None:
    page = """{"@type": "Product", "name": "Desk Lamp"}"""
    buyable = _generic(_ld(page, body="<h1>Desk Lamp</h1><button>In den Warenkorb</button>"))
    assert buyable.is_available is True
    assert buyable.field_confidence["is_available"] == pytest.approx(0.7)
    disabled = _generic(_ld(page, body="<h1>Desk Lamp</h1><button disabled>Add to cart</button>"))
    assert disabled.is_available is None
    other = _generic(
        _ld(
            page,
            body='<h1>Desk Lamp</h1><div class="related-products">'
            "<button>Add to basket</button></div>",
        )
    )
    assert other.is_available is None


def test_stock_from_the_price_or_a_sold_out_notice() -> None:
    page = """{"@type": "Product", "name": "Desk Lamp", "offers": {"price": 10,
        "priceCurrency": "EUR"}}"""
    offered = _generic(_ld(page, body="<h1>Desk Lamp</h1><p>10,00 €</p>"))
    assert (offered.is_available, offered.availability) == (True, "InStock")
    assert offered.field_confidence["is_available"] == pytest.approx(0.6)  # derived
    sold_out = _generic(_ld(page, body="<h1>Desk Lamp</h1><p>10,00 €</p><p>Ausverkauft</p>"))
    assert (sold_out.is_available, sold_out.availability) == (False, "OutOfStock")
    stated = page.replace('"EUR"', '"EUR", "availability": "InStock"')
    notice = '<h1>Desk Lamp</h1><div class="stock-info">Momentálne vypredané</div>'
    assert _generic(_ld(stated, body=notice)).is_available is False  # the page wins
    pickup = '<h1>Desk Lamp</h1><div class="availability">Unavailable for store pickup</div>'
    assert _generic(_ld(stated, body=pickup)).is_available is True
    hidden = '<h1>Desk Lamp</h1><p style="display: none">Sold out</p>'
    assert _generic(_ld(stated, body=hidden)).is_available is True


def test_visible_rating_text_when_there_is_no_aggregate_rating() -> None:
    page = """{"@type": "Product", "name": "Desk Lamp", "offers": {"price": 10,
        "priceCurrency": "EUR"}}"""
    record = _generic(
        _ld(
            page,
            body='<div class="similar-items"><span>3.1 out of 5</span></div>'
            '<h1>Desk Lamp</h1><span class="sr-only">4,7 de 5 estrelas</span>',
        )
    )
    assert record.rating == Decimal("4.7")
    assert _generic(_ld(page)).rating is None


def test_brand_and_item_id_from_shop_json_only_when_it_names_this_product() -> None:
    html = _ld(
        """{"@type": "Product", "name": "Desk Lamp", "offers": {"price": 10,
            "priceCurrency": "EUR"}}""",
        body="""<h1>Desk Lamp</h1>
        <script>window.recs = {"name": "Garden Chair", "brand": "Chairify"};</script>
        <script>window.item = {"itemId": 123456, "name": "Desk Lamp", "brand": "Lumo"};</script>""",
    )
    record = _generic(html)
    assert (record.brand, record.sku) == ("Lumo", "123456")
    assert record.field_confidence["brand"] == pytest.approx(0.6)
    lonely = _generic(
        _ld(
            """{"@type": "Product", "name": "Desk Lamp", "offers": {"price": 10}}""",
            body='<h1>Desk Lamp</h1><script>x = {"brand": "Chairify", "name": "Chair"}</script>',
        ),
        "https://shop.example/p/lamp",
    )
    assert (lonely.brand, lonely.sku) == (None, None)


# -- prices ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "price", "currency"),
    [
        ("R$ 1.299,00", "1299.00", "BRL"),
        ("$1,299.00", "1299.00", "USD"),
        ("1.299,00 €", "1299.00", "EUR"),
        ("1\u00a0299,00\u00a0€", "1299.00", "EUR"),
        ("CHF 1'299.50", "1299.50", "CHF"),
        ("£9.99", "9.99", "GBP"),
        ("¥1,299", "1299", "JPY"),
        ("12,50 EUR", "12.50", "EUR"),
        ("US$ 10", "10", "USD"),
        ("499,99 zł", "499.99", "PLN"),
        ("173,34 Lei", "173.34", "RON"),
    ],
)
def test_locale_prices_are_exact_decimals_with_their_currency(
    text: str, price: str, currency: str
) -> None:
    value = parse_price(text)
    assert value == Decimal(price) and str(value) == price
    assert detect_currency(text) == currency


# -- amazon ----------------------------------------------------------------------------------

AMAZON = """<html><body><div id="wayfinding-breadcrumbs_feature_div"><ul>
<li><a>Casa</a></li><li><a id="breadcrumb-back-link">Voltar</a></li><li><a>Cozinha</a></li>
</ul></div>
<div id="ppd">
<span id="productTitle">Cafeteira Espresso</span>
<a id="bylineInfo">Marca: Oster</a>
<div id="dealBadge_feature_div"><span>Oferta do Dia</span></div>
<div id="corePriceDisplay_desktop_feature_div">
  <span class="savingsPercentage">-25%</span>
  <span class="a-price priceToPay"><span class="a-offscreen">R$ 1.124,25</span></span>
  <span class="basisPrice">De: <span class="a-price a-text-price" data-a-strike="true">
    <span class="a-offscreen">R$ 1.499,00</span></span></span>
</div>
<div id="installmentCalculator_feature_div">em até 10x de R$ 112,43 sem juros</div>
<div id="twister"><li><span class="a-price" data-a-strike="true">
  <span class="a-offscreen">R$ 2.999,00</span></span></li></div>
<div id="availability"><span>Em estoque</span></div>
<span id="acrPopover" title="4,6 de 5 estrelas"></span>
<span id="acrCustomerReviewText">2.345 avaliações de clientes</span>
</div>
<img id="landingImage" src="https://m.media-amazon.com/images/I/61main._AC_SX300_.jpg">
<script>P.when('A').register("ImageBlockATF", function(A){ var data = {
'colorImages': { 'initial': [
 {"hiRes":"https://m.media-amazon.com/images/I/61main._AC_SL1500_.jpg",
  "large":"https://m.media-amazon.com/images/I/61main._AC_.jpg"},
 {"hiRes":null,"large":"https://m.media-amazon.com/images/I/51side._AC_.jpg"},
 {"hiRes":"https://m.media-amazon.com/images/I/71back._AC_SL1500_.jpg"}]},
'colorToAsin': {}}; });</script>
<input type="hidden" id="ASIN" value="B0CAFE0001">
</body></html>"""


def test_amazon_deal_with_list_price_gallery_and_breadcrumb() -> None:
    record = AmazonParser().parse(AMAZON, "https://www.amazon.com.br/dp/B0CAFE0001")
    assert (record.price, record.original_price, record.currency) == (
        Decimal("1124.25"),
        Decimal("1499.00"),
        "BRL",
    )
    assert (record.brand, record.asin, record.category) == ("Oster", "B0CAFE0001", "Casa > Cozinha")
    assert (record.rating, record.review_count, record.is_available) == (
        Decimal("4.6"),
        2345,
        True,
    )
    # Main image first at its high resolution, then the gallery, hi-res where the page has it.
    assert record.image_urls == [
        "https://m.media-amazon.com/images/I/61main._AC_SL1500_.jpg",
        "https://m.media-amazon.com/images/I/51side._AC_.jpg",
        "https://m.media-amazon.com/images/I/71back._AC_SL1500_.jpg",
    ]
    assert record.quality_issues == []
    assert record.field_confidence["price"] == pytest.approx(0.95)


def test_amazon_variation_swatch_prices_are_not_the_list_price() -> None:
    html = AMAZON.replace('<span class="basisPrice">', '<span class="x">').replace(
        'data-a-strike="true">\n    <span class="a-offscreen">R$ 1.499,00', ">\n    <span>"
    )
    record = AmazonParser().parse(html, "https://www.amazon.com.br/dp/B0CAFE0001")
    assert (record.price, record.original_price) == (Decimal("1124.25"), None)


def test_amazon_robot_check_and_non_product_pages_are_recognized() -> None:
    captcha = """<html><head><title>Amazon.com</title></head><body>
    <form action="/errors/validateCaptcha"><p>Type the characters you see in this image:</p>
    </form></body></html>"""
    with pytest.raises(CaptchaPage, match="robot check"):
        AmazonParser().parse(captcha, "https://www.amazon.com/dp/B0X")
    search = '<html><body><div class="s-result-list"></div></body></html>'
    with pytest.raises(NotProductPage, match="search results"):
        AmazonParser().parse(search, "https://www.amazon.com/s?k=lamp")


# -- validation rules ------------------------------------------------------------------------


def _record(**fields: object) -> ProductRecord:
    base: dict[str, object] = {
        "url": URL,
        "product_name": "Desk Lamp",
        "price": Decimal("10.00"),
        "currency": "EUR",
    }
    return ProductRecord(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "issue"),
    [
        ({"product_name": "x" * 501}, "product_name is 501 characters (at most 500)"),
        ({"product_name": "  "}, "product_name is empty"),
        ({"price": Decimal("0")}, "price 0 is not positive"),
        ({"price": Decimal("-1.50")}, "price -1.50 is not positive"),
        ({"price": Decimal("1.999")}, "price 1.999 has more than 2 decimal places"),
        ({"original_price": Decimal("9.00")}, "original_price 9.00 is below price 10.00"),
        ({"price": None, "original_price": Decimal("9.00")}, "original_price without a price"),
        ({"rating": Decimal("5.5")}, "rating 5.5 is outside 0-5"),
        ({"review_count": -3}, "review_count -3 is negative"),
        ({"currency": "R$"}, "currency 'R$' is not an ISO 4217 code"),
        ({"currency": None}, "price without a currency"),
        ({"image_urls": ["/img/1.jpg"]}, "image URL '/img/1.jpg' is not an absolute http(s) URL"),
    ],
)
def test_each_validation_rule(fields: dict[str, object], issue: str) -> None:
    assert validate(_record(**fields)) == [issue]


def test_a_clean_record_breaks_no_rule() -> None:
    assert validate(_record(original_price=Decimal("10.00"), rating=Decimal("5"))) == []


def test_an_out_of_range_rating_is_kept_and_listed_not_dropped() -> None:
    record = _generic(
        _ld(
            """{"@type": "Product", "name": "Desk Lamp", "offers": {"price": 10,
                "priceCurrency": "EUR"},
                "aggregateRating": {"ratingValue": "8.5", "reviewCount": 3}}"""
        )
    )
    assert record.rating == Decimal("8.5")
    assert record.quality_issues == ["rating 8.5 is outside 0-5"]
    scaled = _generic(
        _ld(
            """{"@type": "Product", "name": "Desk Lamp", "offers": {"price": 10,
                "priceCurrency": "EUR"},
                "aggregateRating": {"ratingValue": "85", "bestRating": "100"}}"""
        )
    )
    assert (scaled.rating, scaled.quality_issues) == (Decimal("4.25"), [])
