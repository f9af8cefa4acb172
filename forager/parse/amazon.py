"""Amazon product pages (every country site, classic and current layouts) -> ``ProductRecord``."""

from __future__ import annotations

import contextlib
import json
import re
from decimal import Decimal
from typing import Any

from selectolax.lexbor import LexborHTMLParser, LexborNode

from forager.errors import NotProductPage
from forager.parse.base import EXTRACTED_FIELDS, ProductRecord
from forager.parse.classify import raise_if_blocked
from forager.parse.prices import currency_for_url, detect_currency, parse_price
from forager.parse.quality import check
from forager.parse.structured import absolute_url, clean, visible_text

# The price the shopper pays, most specific first. Current layouts show it as an .a-price
# (the pt-BR Pix price lives there too); classic layouts use the #priceblock_* ids, where a
# deal or sale price beats "our price" (which is then the struck-through one).
_PRICE_SELECTORS = (
    "#corePriceDisplay_desktop_feature_div .priceToPay",
    "#corePriceDisplay_desktop_feature_div .apexPriceToPay",
    "#corePrice_desktop .apexPriceToPay",
    "#corePrice_feature_div .a-price",
    "#corePriceDisplay_desktop_feature_div .a-price:not([data-a-strike])",
    "#priceblock_dealprice",
    "#priceblock_saleprice",
    "#priceblock_ourprice",
    "#price_inside_buybox",
    "#newBuyBoxPrice",
    "#kindle-price",
    "#price .a-color-price",
    # Media pages (music, books, video) without a buy-box price: the selected format's price.
    ".top-level.selected-row .dp-price-col .a-color-price",
)
# Struck-through list prices ("List Price", "De:", "RRP", "UVP", "Prix conseillé").
_LIST_PRICE_SELECTORS = (
    ".basisPrice .a-offscreen",
    ".a-price[data-a-strike='true'] .a-offscreen",
    ".priceBlockStrikePriceString",
    "#listPrice",
)
# Blocks in which a struck price is this product's own, never a carousel's.
_PRICE_BLOCKS = (
    "#corePriceDisplay_desktop_feature_div",
    "#corePrice_desktop",
    "#corePrice_feature_div",
    "#price",
    "#apex_desktop",
)
_BRAND_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"^visit the (.+?) store$",  # en
        r"^visite a loja (?:d[aoe]s? )?(.+?)$",  # pt
        r"^besuchen sie den (.+?)[- ]store$",  # de
        r"^visiter la boutique (.+?)$",  # fr
        r"^visita lo store di (.+?)$",  # it
        r"^visita la tienda de (.+?)$",  # es
        r"^(?:brand|marca|marke|marque|merk)\s*:\s*(.+)$",
    )
)
_FIELDS = tuple(name for name in EXTRACTED_FIELDS if name != "description")
_OTHER_PRODUCT = re.compile(r"carousel|twister|sims|sp_detail|sponsored|similar|compare", re.I)
_ASIN_IN_URL = re.compile(r"/(?:dp|gp/product|gp/aw/d)/([A-Z0-9]{10})(?:[/?#]|$)")
_FIRST_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_IMAGE_ID = re.compile(r"/images/I/([^./]+)")
_UNAVAILABLE = re.compile(
    r"unavailable|out of stock|nicht verfügbar|indisponible|non disponibile|não disponível"
    r"|indisponível|esgotado|no disponible|agotado|niet beschikbaar",
    re.IGNORECASE,
)
_AVAILABLE = re.compile(
    r"in stock|left in stock|en stock|auf lager|disponibilità immediata|em estoque|disponible"
    r"|verfügbar|disponibile|usually ships|ships within|op voorraad",
    re.IGNORECASE,
)


class AmazonParser:
    """Extracts an Amazon product detail page; robot checks and 404 "dog" pages are errors."""

    name = "amazon"
    version = "2"
    hosts: tuple[str, ...] = ("amazon.*", "amazon.co.*", "amazon.com.*")

    def parse(self, html: str, url: str) -> ProductRecord:
        """The product on ``html``; raises CaptchaPage / BlockedPage / NotProductPage."""
        # Amazon pages carry their product markup (#productTitle) deep in 1-2 MB: markers first.
        raise_if_blocked(html, url, markup_first=False)
        tree = LexborHTMLParser(html)
        title = _title(tree)
        if title is None:
            raise NotProductPage(_not_product_reason(tree, url))
        # Product blocks live inside #ppd; carousels of other products live outside it.
        root = tree.css_first("#ppd") or tree.body or tree.root
        assert root is not None
        price_text = _price_text(root)
        price = parse_price(price_text) if price_text else None
        list_text = _list_price_text(root)
        original = parse_price(list_text) if list_text else None
        if original is not None and price is not None and original <= price:
            original = None  # a "list price" not above the price is not a discount
        availability = _availability(root)
        asin = _asin(tree, url)
        currency = _currency(price_text, list_text, url)
        record = ProductRecord(
            url=url,
            product_name=title,
            price=price,
            currency=currency,
            original_price=original,
            rating=_rating(root),
            review_count=_review_count(root),
            availability=availability,
            is_available=_is_available(root, availability, price),
            brand=_brand(root),
            category=_category(tree),
            sku=asin,
            asin=asin,
            image_urls=_images(tree, html, url),
            parser_name=self.name,
            parser_version=self.version,
        )
        sources = dict.fromkeys(_FIELDS, "markup")
        if not any(t and detect_currency(t, url) for t in (price_text, list_text)):
            sources["currency"] = "url"
        if availability is None or not (
            _UNAVAILABLE.search(availability) or _AVAILABLE.search(availability)
        ):
            sources["is_available"] = "derived"
        return check(record, sources)


def _title(tree: LexborHTMLParser) -> str | None:
    # Digital music / e-book pages name their title block after the store.
    for selector in ("#productTitle", "#title", "#btAsinTitle", "[id$=ProductTitle_feature_div]"):
        node = tree.css_first(selector)
        if node is not None and (text := clean(node.text())):
            return text
    return None


def _not_product_reason(tree: LexborHTMLParser, url: str) -> str:
    """Say what the page is, since it has no product title."""
    page_title = clean(node.text()) if (node := tree.css_first("title")) else None
    if tree.css_first('[data-component-type="s-search-result"], .s-result-list'):
        what = "an Amazon search results page"
    elif tree.css_first('img[alt*="Dogs of Amazon"], a[href*="/ref=cs_404_"]'):
        what = "an Amazon 'page not found' (dog) page"
    elif page_title and re.search(
        r"not found|não encontrad|nicht gefunden|introuvable", page_title, re.I
    ):
        what = f"an Amazon error page ({page_title!r})"
    else:
        what = f"an Amazon page without a product title ({page_title or 'untitled'!r})"
    return f"{url} is {what}, not a product page"


def _a_price_text(node: LexborNode) -> str | None:
    """The text of an .a-price (its hidden .a-offscreen copy, else symbol + whole + fraction)."""
    offscreen = node.css_first(".a-offscreen")
    if offscreen is not None and (text := clean(offscreen.text())):
        return text
    whole = node.css_first(".a-price-whole")
    if whole is not None:
        symbol = node.css_first(".a-price-symbol")
        fraction = node.css_first(".a-price-fraction")
        whole_text = clean(whole.text()) or ""
        # The decimal mark sits inside .a-price-whole ("303 ,"): keep which one it is.
        mark = "," if whole_text.endswith(",") else "."
        text = (clean(symbol.text()) or "") if symbol is not None else ""
        text += whole_text.rstrip(" .,")  # clean() left single spaces only
        if fraction is not None and (digits := clean(fraction.text())):
            text += mark + digits
        return text
    return clean(visible_text(node))


def _price_text(root: LexborNode) -> str | None:
    for selector in _PRICE_SELECTORS:
        for node in root.css(selector):
            text = _a_price_text(node)
            if text and parse_price(text) is not None:
                return text
    return None


def _list_price_text(root: LexborNode) -> str | None:
    blocks = [b for sel in _PRICE_BLOCKS for b in root.css(sel)]
    # Blocks first; then the whole product area, minus other products' carousels and the
    # variation picker (whose swatches carry their own struck prices).
    for block, guarded in [*((b, False) for b in blocks), (root, True)]:
        for selector in _LIST_PRICE_SELECTORS:
            for node in block.css(selector):
                if guarded and _in_other_product(node, root):
                    continue
                text = clean(node.text())
                if text and parse_price(text) is not None:
                    return text
    return None


def _in_other_product(node: LexborNode, root: LexborNode) -> bool:
    """Whether ``node`` sits in a carousel, sponsored tile or variation swatch."""
    current = node.parent
    while current is not None and current.mem_id != root.mem_id:
        marker = f"{current.attributes.get('id') or ''} {current.attributes.get('class') or ''}"
        if _OTHER_PRODUCT.search(marker):
            return True
        current = current.parent
    return False


def _currency(price_text: str | None, list_text: str | None, url: str) -> str | None:
    for text in (price_text, list_text):
        if text and (code := detect_currency(text, url)):
            return code
    return currency_for_url(url)


def _rating(root: LexborNode) -> Decimal | None:
    for selector in ("#acrPopover", "#averageCustomerReviews .a-icon-alt"):
        node = root.css_first(selector)
        if node is None:
            continue
        text = node.attributes.get("title") or node.text()
        match = _FIRST_NUMBER.search(text or "")
        if match:
            return Decimal(match.group(0).replace(",", "."))  # out of 0-5: validation says so
    return None


def _review_count(root: LexborNode) -> int | None:
    node = root.css_first("#acrCustomerReviewText")
    if node is None:
        return None
    match = re.search(r"\d[\d.,\s\u00a0\u202f]*", node.text())
    if match is None:
        return None
    return int(re.sub(r"\D", "", match.group(0)))


def _availability(root: LexborNode) -> str | None:
    for selector in ("#availability", "#outOfStock", "#availabilityInsideBuyBox_feature_div"):
        node = root.css_first(selector)
        if node is not None and (text := clean(visible_text(node))):
            return text
    return None


def _is_available(root: LexborNode, availability: str | None, price: Decimal | None) -> bool | None:
    if availability:
        if _UNAVAILABLE.search(availability):
            return False
        if _AVAILABLE.search(availability):
            return True
    if root.css_first("#outOfStock") is not None:
        return False
    if price is not None or root.css_first("#add-to-cart-button") is not None:
        return True
    return None


def _brand(root: LexborNode) -> str | None:
    node = root.css_first("#bylineInfo")
    text = clean(node.text()) if node is not None else None
    if not text:
        return None
    for pattern in _BRAND_PATTERNS:
        match = pattern.match(text)
        if match:
            return clean(match.group(1))
    return text


def _category(tree: LexborHTMLParser) -> str | None:
    crumbs = [
        text
        for node in tree.css("#wayfinding-breadcrumbs_feature_div li a:not(#breadcrumb-back-link)")
        if (text := clean(node.text()))
    ]
    return " > ".join(crumbs) or None


def _asin(tree: LexborHTMLParser, url: str) -> str | None:
    node = tree.css_first("input#ASIN")
    value = node.attributes.get("value") if node is not None else None
    if value:
        return value.strip()
    match = _ASIN_IN_URL.search(url)
    if match:
        return match.group(1)
    canonical = tree.css_first('link[rel="canonical"]')
    href = canonical.attributes.get("href") if canonical is not None else None
    match = _ASIN_IN_URL.search(href or "")
    return match.group(1) if match else None


def _gallery(html: str) -> list[str]:
    """Gallery image URLs (hiRes, else large) from the inline colorImages 'initial' array."""
    start = html.find("'colorImages'")
    if start < 0:
        return []
    bracket = html.find("[", html.find("'initial'", start))
    if bracket < 0 or bracket - start > 200:
        return []
    try:
        entries, _ = json.JSONDecoder().raw_decode(html, bracket)
    except (ValueError, RecursionError):
        return []
    urls: list[str] = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict):
            best = entry.get("hiRes") or entry.get("large") or entry.get("mainUrl")
            if isinstance(best, str) and best:
                urls.append(best)
    return urls


def _landing_image(tree: LexborHTMLParser) -> tuple[str | None, bool]:
    """The main image's best URL, and whether it is the high-resolution one."""
    node = tree.css_first("#landingImage") or tree.css_first("#imgBlkFront")
    if node is None:
        return None, False
    attrs = node.attributes
    if attrs.get("data-old-hires"):
        return attrs["data-old-hires"], True
    dynamic: Any = None
    with contextlib.suppress(ValueError, RecursionError):
        dynamic = json.loads(attrs.get("data-a-dynamic-image") or "{}")
    if isinstance(dynamic, dict) and dynamic:
        # The largest rendition: sizes are [width, height].
        return str(max(dynamic, key=lambda u: _area(dynamic[u]))), False
    src = attrs.get("src")
    return (src.strip() if src and not src.strip().startswith("data:") else None), False


def _area(size: object) -> int:
    if isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) for v in size):
        return int(size[0]) * int(size[1])
    return 0


def _images(tree: LexborHTMLParser, html: str, url: str) -> list[str]:
    """Main image first, then the gallery, one URL per Amazon image id (high resolution first)."""
    landing, landing_hires = _landing_image(tree)
    gallery = _gallery(html)
    by_id: dict[str, str] = {}
    order: list[str] = []
    for candidate, preferred in [(landing, landing_hires), *((g, True) for g in gallery)]:
        if not candidate:
            continue
        absolute = absolute_url(candidate, url)
        match = _IMAGE_ID.search(absolute)
        key = match.group(1) if match else absolute
        if key not in by_id:
            order.append(key)
            by_id[key] = absolute
        elif preferred and key == order[0] and not landing_hires:
            by_id[key] = absolute  # the gallery's rendition beats a small landing image
    return [by_id[key] for key in order]
