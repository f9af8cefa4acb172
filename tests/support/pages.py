"""HTML for the test site: product pages, Amazon-style pages, a captcha page and filler.

Everything here is pure and deterministic; the expensive parts (filler) are cached.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from functools import lru_cache
from http import HTTPStatus
from typing import Any

DEFAULT_KB = 40
MAX_KB = 10 * 1024

_SENTENCES = (
    "Our catalogue is refreshed every morning with new arrivals from trusted suppliers.",
    "Free shipping applies to most orders over fifty dollars within the continental US.",
    "Every item ships in recyclable packaging and arrives with a printed invoice.",
    "Returns are accepted within thirty days when the item is unused and complete.",
    "Customer service is available by chat, e-mail and phone on business days.",
    "Gift cards never expire and can be combined with seasonal promotions.",
    "Members collect points on each purchase and redeem them at checkout.",
    "Product photos are illustrative; colours may vary slightly between screens.",
    "Warranty terms depend on the manufacturer and are listed on the invoice.",
    "Sign up for the newsletter to hear about clearance sales before anyone else.",
)
_NAV_SECTIONS = ("Home", "Electronics", "Garden", "Kitchen", "Toys", "Sports", "Books", "Deals")


def price_text(price: Decimal) -> str:
    """A visible US price, e.g. ``$5.99``."""
    return f"${price:,.2f}"


def _json_ld(data: dict[str, Any]) -> str:
    text = json.dumps(data, indent=2).replace("</", "<\\/")
    return f'<script type="application/ld+json">\n{text}\n</script>'


def _paragraph(i: int) -> str:
    sentences = " ".join(_SENTENCES[(i + k) % len(_SENTENCES)] for k in range(4))
    return f'<p class="copy copy-{i % 9}">{sentences}</p>\n'


def _nav() -> str:
    items = "".join(
        f'<li class="nav-item"><a href="/product/{i + 1}" class="nav-link">{name}</a></li>'
        for i, name in enumerate(_NAV_SECTIONS)
    )
    return (
        '<header class="site-header"><div class="logo"><a href="/">Test Shop</a></div>\n'
        '<form class="search" action="/search"><input type="search" name="q" '
        'placeholder="Search the shop"><button type="submit">Search</button></form>\n'
        f'<nav class="main-nav"><ul class="nav-list">{items}</ul></nav></header>\n'
    )


def _footer() -> str:
    columns = "".join(
        f'<div class="footer-col"><h4>{name}</h4><ul>'
        + "".join(f'<li><a href="/notproduct">{name} guide {k}</a></li>' for k in range(5))
        + "</ul></div>"
        for name in _NAV_SECTIONS
    )
    return (
        f'<footer class="site-footer">{columns}\n'
        '<p class="legal">&copy; Test Shop Inc. All prices in US dollars.</p></footer>\n'
    )


@lru_cache(maxsize=64)
def filler(kb: int = DEFAULT_KB) -> tuple[str, str]:
    """Padding markup of roughly ``kb`` KiB, split into (before-content, after-content)."""
    kb = max(0, min(kb, MAX_KB))
    if kb == 0:
        return "", ""
    target = kb * 1024
    top, bottom = [_nav()], [_footer()]
    size = len(top[0]) + len(bottom[0])
    i = 0
    while size < target:
        block = _paragraph(i)
        (top if i % 2 == 0 else bottom).append(block)
        size += len(block)
        i += 1
    top_html = '<div class="promo">\n' + "".join(top) + "</div>\n"
    bottom_html = '<div class="more-info">\n' + "".join(reversed(bottom)) + "</div>\n"
    return top_html, bottom_html


def product_page(
    n: int,
    price: Decimal,
    available: bool,
    base_url: str,
    kb: int = DEFAULT_KB,
    images: list[str] | None = None,
    currency: str = "USD",
) -> str:
    """A shop product page with schema.org JSON-LD plus a decoy "Related products" block."""
    name = f"Test Product {n}"
    if images is None:
        images = [f"{base_url}/img/{n}-1.jpg", f"{base_url}/img/{n}-2.jpg"]
    availability = "InStock" if available else "OutOfStock"
    product = {
        "@context": "https://schema.org",
        "@type": "Product",
        "name": name,
        "description": f"Description of test product {n}.",
        "sku": f"SKU-{n}",
        "brand": {"@type": "Brand", "name": f"Brand {n % 7}"},
        "category": f"Category {n % 5}",
        "image": images,
        "offers": {
            "@type": "Offer",
            "url": f"{base_url}/product/{n}",
            "price": str(price),
            "priceCurrency": currency,
            "availability": f"https://schema.org/{availability}",
        },
        "aggregateRating": {"@type": "AggregateRating", "ratingValue": "4.5", "reviewCount": n},
    }
    m = n + 1
    decoy_price = Decimal(n % 500 + 10) + Decimal("0.49")
    decoy = {
        "@context": "https://schema.org",
        "@type": "Product",
        "name": f"Related Product {m}",
        "sku": f"SKU-R{m}",
        "offers": {"@type": "Offer", "price": str(decoy_price), "priceCurrency": "USD"},
    }
    top, bottom = filler(kb)
    stock = "In stock" if available else "Out of stock"
    return f"""<!DOCTYPE html>
<html lang="en"><head>
<meta charset="utf-8">
<title>{name} | Test Shop</title>
<meta name="description" content="Buy {name} at Test Shop.">
<meta property="og:type" content="product">
<meta property="og:title" content="{name}">
<link rel="canonical" href="{base_url}/product/{n}">
{_json_ld(product)}
</head><body>
{top}<main id="product" class="product-detail">
<nav class="breadcrumb"><a href="/">Home</a> &rsaquo;
<a href="/notproduct">Category {n % 5}</a></nav>
<h1 class="product-title">{name}</h1>
<div class="price-box"><span class="price">{price_text(price)}</span>
<span class="stock">{stock}</span></div>
<div class="gallery"><img src="{base_url}/img/{n}-1.jpg" alt="{name}">
<img src="{base_url}/img/{n}-2.jpg" alt="{name}, side view"></div>
<p class="description">Description of test product {n}.</p>
<button class="add-to-cart" type="button">Add to cart</button>
</main>
<section class="related"><h2>Related products</h2>
<div class="product-card" itemscope itemtype="https://schema.org/Product">
<a href="/product/{m}" itemprop="url"><span itemprop="name">Related Product {m}</span></a>
<div itemprop="offers" itemscope itemtype="https://schema.org/Offer">
<meta itemprop="priceCurrency" content="USD">
<span class="price" itemprop="price" content="{decoy_price}">{price_text(decoy_price)}</span>
</div></div>
{_json_ld(decoy)}
</section>
{bottom}</body></html>
"""


def js_price_page(n: int, price: Decimal) -> str:
    """A product page whose price exists only after inline JavaScript runs."""
    cents = int(price * 100)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Test Product {n} | Test Shop</title></head>
<body>
<h1 class="product-title">Test Product {n}</h1>
<div class="price-box"><span class="price" id="price">Loading price...</span></div>
<script>
(function () {{
  var cents = {cents};
  document.getElementById("price").textContent = "$" + (cents / 100).toFixed(2);
}})();
</script>
</body></html>
"""


def js_product_page(n: int, price: Decimal, ms: int) -> str:
    """A product page with no product data at all until its script runs, ``ms`` after load:
    it then adds the schema.org Product (JSON-LD) and the visible price. There is an image
    too, which the browser fetcher blocks by default."""
    cents = int(price * 100)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Test Product {n} | Test Shop</title></head>
<body>
<h1 class="product-title">Test Product {n}</h1>
<img src="/img/js-{n}.jpg" alt="Test Product {n}">
<div class="price-box" id="box">Loading price...</div>
<script>
setTimeout(function () {{
  var price = ({cents} / 100).toFixed(2);
  var data = document.createElement("script");
  data.type = "application/ld+json";
  data.text = JSON.stringify({{
    "@context": "https://schema.org", "@type": "Product", "name": "Test Product {n}",
    "sku": "JS-{n}",
    "offers": {{"@type": "Offer", "price": price, "priceCurrency": "USD",
               "availability": "https://schema.org/InStock"}}
  }});
  document.head.appendChild(data);
  var box = document.getElementById("box");
  box.textContent = "";
  var span = document.createElement("span");
  span.className = "price";
  span.id = "js-price";
  span.textContent = "$" + price;
  box.appendChild(span);
}}, {ms});
</script>
</body></html>
"""


_AMAZON_EN = """<html><head><title>Amazon.com: Widget Pro</title></head><body>
{top}<div id="wayfinding-breadcrumbs_feature_div"><ul><li><a>Electronics</a></li><li><a>Gadgets</a></li></ul></div>
<span id="productTitle">  Widget Pro 3000  </span>
<a id="bylineInfo" href="/stores/Acme">Visit the Acme Store</a>
<div id="corePrice_feature_div"><span class="a-price"><span class="a-offscreen">$1,299.90</span></span></div>
<span class="a-price a-text-price" data-a-strike="true"><span class="a-offscreen">$1,499.00</span></span>
<span id="acrPopover" title="4.5 out of 5 stars"></span>
<span id="acrCustomerReviewText">1,234 ratings</span>
<div id="availability"><span>In Stock</span></div>
<img id="landingImage" data-old-hires="https://m.media-amazon.com/images/I/71abcDEF01L._AC_SL1500_.jpg" data-a-dynamic-image='{"https://m.media-amazon.com/images/I/71abcDEF01L._AC_SX300_.jpg":[300,300]}'>
<input type="hidden" id="ASIN" value="{asin}">
{bottom}</body></html>
"""  # noqa: E501

_AMAZON_BR = """<html><head><title>Amazon.com.br: Widget Pro</title></head><body>
{top}<div id="wayfinding-breadcrumbs_feature_div"><ul><li><a>Electronics</a></li><li><a>Gadgets</a></li></ul></div>
<span id="productTitle">  Widget Pro 3000  </span>
<a id="bylineInfo" href="/stores/Acme">Visite a loja da Acme</a>
<div id="corePrice_feature_div"><span class="a-price"><span class="a-offscreen">R$ 1.299,90</span></span></div>
<span class="a-price a-text-price" data-a-strike="true"><span class="a-offscreen">R$ 1.499,00</span></span>
<span id="acrPopover" title="4,5 de 5 estrelas"></span>
<span id="acrCustomerReviewText">1.234 avaliações de clientes</span>
<div id="availability"><span>Em estoque</span></div>
<img id="landingImage" data-old-hires="https://m.media-amazon.com/images/I/71abcDEF01L._AC_SL1500_.jpg" data-a-dynamic-image='{"https://m.media-amazon.com/images/I/71abcDEF01L._AC_SX300_.jpg":[300,300]}'>
<input type="hidden" id="ASIN" value="{asin}">
{bottom}</body></html>
"""  # noqa: E501


def amazon_page(asin: str, locale: str = "en-US", kb: int = DEFAULT_KB) -> str:
    """The Amazon-style product page (``en-US`` or ``pt-BR``) for ``asin``."""
    template = _AMAZON_BR if locale == "pt-BR" else _AMAZON_EN
    top, bottom = filler(kb)
    # str.replace, not str.format: the template holds literal JSON braces.
    return template.replace("{asin}", asin).replace("{top}", top).replace("{bottom}", bottom)


CAPTCHA_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Amazon.com</title></head>
<body><div class="a-container a-padding-double-large">
<div class="a-box a-alert a-alert-info a-spacing-base"><div class="a-box-inner">
<h4>Enter the characters you see below</h4>
<p class="a-last">Sorry, we just need to make sure you're not a robot. For best results,
please make sure your browser is accepting cookies.</p>
</div></div>
<form method="get" action="/errors/validateCaptcha" name="">
<input type="hidden" name="amzn" value="dGVzdC1jYXB0Y2hh">
<input type="hidden" name="amzn-r" value="&#047;">
<div class="a-row a-text-center">
<img src="https://images-na.ssl-images-amazon.com/captcha/usvmgloq/Captcha_kwrrnqwkph.jpg">
</div>
<input autocomplete="off" spellcheck="false" placeholder="Type characters"
 id="captchacharacters" name="field-keywords" type="text">
<button type="submit" class="a-button-text">Continue shopping</button>
</form>
</div></body></html>
"""


def article_page(kb: int = DEFAULT_KB) -> str:
    """An ordinary blog article: no product data at all."""
    top, bottom = filler(kb)
    article = {
        "@context": "https://schema.org",
        "@type": "Article",
        "headline": "How to choose a widget",
        "author": {"@type": "Person", "name": "Test Author"},
    }
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>How to choose a widget | Test Blog</title>
<meta property="og:type" content="article">
{_json_ld(article)}
</head><body>
{top}<article class="post"><h1>How to choose a widget</h1>
<p>Widgets come in many shapes. This guide explains what to look for before buying one.</p>
<p>Think about size, material and warranty, and read the reviews of other owners.</p>
</article>
{bottom}</body></html>
"""


def status_page(code: int) -> str:
    """A small HTML body for an error or informational status."""
    try:
        phrase = HTTPStatus(code).phrase
    except ValueError:
        phrase = "Status"
    return (
        f"<!DOCTYPE html><html><head><title>{code} {phrase}</title></head>"
        f"<body><h1>{code} {phrase}</h1><p>Test site status page.</p></body></html>\n"
    )


def big_chunk(size: int = 64 * 1024) -> bytes:
    """``size`` bytes of HTML-ish text, used to stream large bodies."""
    block = "".join(_paragraph(i) for i in range(len(_SENTENCES))).encode()
    return (block * (size // len(block) + 1))[:size]


# A 1x1 grey baseline JPEG.
TINY_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQEASABIAAD/2wBDAAMCAgICAgMCAgIDAwMDBAYEBAQEBAgGBgUGCQgKCgkICQkKDA8M"
    "CgsOCwkJDRENDg8QEBEQCgwSExIQEw8QEBD/yQALCAABAAEBAREA/8wABgAQEAX/2gAIAQEAAD8A0s8g/9k="
)
