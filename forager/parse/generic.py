"""Any shop's product page from schema.org data (JSON-LD, microdata, RDFa) and meta tags."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from html import unescape
from typing import Any

from selectolax.lexbor import LexborHTMLParser, LexborNode

from forager.errors import NotProductPage
from forager.parse import crosscheck, visible
from forager.parse.base import EXTRACTED_FIELDS, ProductRecord
from forager.parse.classify import not_product_reason, raise_if_blocked
from forager.parse.prices import (
    currency_for_url,
    detect_currency,
    normalize_currency,
    parse_price,
    to_decimal,
)
from forager.parse.quality import check
from forager.parse.structured import (
    OfferFacts,
    absolute_url,
    clean,
    distinct_images,
    embedded_items,
    has_type,
    image_key,
    json_ld_blocks,
    meta_content,
    offer_facts,
    product_images,
    rating_facts,
    walk_json,
)
from forager.parse.visible import name_score, words

# Blocks that hold other products: their structured data is never the page's product.
_OTHER_PRODUCTS = re.compile(
    r"recommend|related|similar|carousel|upsell|cross-?sell|also-?(?:bought|viewed|like)"
    r"|recently|sponsored|alternatives|compare|bundle|accessor",
    re.IGNORECASE,
)
# JSON-LD keys under which a Product is some other product.
_OTHER_PRODUCT_KEYS = frozenset(
    {
        "isRelatedTo",
        "isSimilarTo",
        "isAccessoryOrSparePartFor",
        "isConsumableFor",
        "itemListElement",
    }
)
_STRUCTURED_FIELDS = tuple(name for name in EXTRACTED_FIELDS if name != "asin")
_DIGIT = re.compile(r"\d")
# A tag starts with a name, "/" or "!" and never spans another "<": each match attempt stops at
# the next "<", so a run of "<" is scanned once (``<[^>]+>`` rescanned the rest from each "<").
_TAGS = re.compile(r"<[a-zA-Z/!][^<>]*>")
_SITE_SEPARATORS = "|–—-"
# How far up from an element a "related products" container is looked for: a product card sits a
# few levels below its carousel, and the bound keeps every walk O(1) on 10,000-deep documents.
_ANCESTOR_LEVELS = 40


@dataclass(slots=True)
class _Candidate:
    """One Product found in structured data, with where it came from."""

    data: dict[str, Any]
    node: LexborNode | None  # the item's element (or the JSON-LD <script>)
    nested: bool  # a property value of another item
    order: int
    source: str = "json-ld"  # json-ld | microdata | rdfa


class GenericParser:
    """Extracts the page's main product; no rules for particular shops."""

    name = "generic"
    version = "5"
    hosts: tuple[str, ...] = ()  # the fallback: every host no other parser claims

    def parse(self, html: str, url: str) -> ProductRecord:
        """The main product on ``html``; raises CaptchaPage / BlockedPage / NotProductPage."""
        raise_if_blocked(html, url)
        tree = LexborHTMLParser(html)
        meta = meta_content(tree)
        headings = [t for n in tree.css("h1") if (t := clean(n.text(separator=" ")))]
        candidates = _candidates(tree)
        main = _pick_main(candidates, headings, meta)
        page_title = clean(node.text()) if (node := tree.css_first("title")) else None
        titles = _page_titles(meta)
        references = [t for t in (*titles, page_title) if t]
        if main is not None:
            references.insert(0, _text(main.data.get("name")) or "")
        # Read once: whether the product is complete and the record both need its offer.
        offers = offer_facts(main.data.get("offers") if main is not None else None)
        complete = _complete(main, offers)
        structured_price = offers.price
        _apply_meta_prices(offers, meta)
        # Complete data is cross-checked against the buy box; its price first (``expect``).
        seen = visible.read(tree, url, references, full=not complete, expect=offers.price)
        if main is None and not _meta_is_product(meta):
            _refuse_or_accept(url, page_title, seen)
        data = main.data if main is not None else {}
        kind = (
            main.source if main is not None else ("meta" if _meta_is_product(meta) else "visible")
        )
        sources = dict.fromkeys(_STRUCTURED_FIELDS, kind)
        title = _title(
            data, headings if seen.heading is None else [seen.heading, *headings], titles, tree
        )
        if title is None:
            raise NotProductPage(f"{url} has product markup but no product name")
        if title in headings:
            sources["product_name"] = "heading"
        if offers.price is not None and offers.price != structured_price:
            sources["price"] = "meta"
        if crosscheck.visible_price(offers, seen):
            sources["price"] = "visible"
        currency = offers.currency or normalize_currency(
            meta.get("product:price:currency") or meta.get("og:price:currency")
        )
        if currency is not None and offers.currency is None:
            sources["currency"] = "meta"
        if currency is None and sources["price"] == "visible" and seen.price is not None:
            currency = seen.price.currency
            sources["currency"] = "visible"
        if offers.price is not None and not _is_discount(offers):
            offers.list_price = _visible_list_price(
                seen.window, main, offers.price, offers.currency
            )
            sources["original_price"] = "visible"
            if offers.list_price is None:
                offers.list_price = _script_list_price(html, offers.price)
                sources["original_price"] = "script"
        rating, count = rating_facts(data.get("aggregateRating"))
        availability = offers.availability
        if availability is None:
            availability = _meta_availability(meta)
            sources["availability"] = sources["is_available"] = "meta"
        if availability is None:
            availability = _loose_availability(tree)
            sources["availability"] = sources["is_available"] = "microdata"
        images = product_images(data.get("image"), url)
        if not images and (og_image := meta.get("og:image")):
            images = [absolute_url(og_image, url)]
            sources["image_urls"] = "meta"
        if len(images) <= 1:
            # Structured data names one image at most: the page's own gallery (images whose
            # alt text is the product's name) holds the rest, main image first.
            gallery = _alt_gallery(tree, title, url)
            if gallery and (not images or image_key(images[0]) not in map(image_key, gallery)):
                sources["image_urls"] = "visible"
                images = [*gallery, *images]
            else:
                images = [*images, *gallery]
        images = distinct_images(images)
        if currency is None and offers.price is not None:
            currency = currency_for_url(url)
            sources["currency"] = "url"
        if is_available_from(availability) is False and not seen.buy_button:
            seen.buy_button = visible.has_buy_button(tree)
        is_available, stock_source = crosscheck.availability(
            is_available_from(availability), seen, offers.price
        )
        if stock_source is not None:
            sources["is_available"] = stock_source
            if availability is None or stock_source == "visible":
                availability = "InStock" if is_available else "OutOfStock"
                sources["availability"] = stock_source
        if rating is None:
            rating = _visible_rating(seen.window)
            sources["rating"] = "visible"
        sku, sources["sku"] = crosscheck.sku(data, seen, html, url, _canonical(tree), kind)
        gtin, sources["gtin"] = crosscheck.global_id(data, seen, sku, kind)
        mpn, sources["mpn"] = crosscheck.part_number(data, seen, kind)
        brand = _brand(data.get("brand")) or _brand(data.get("manufacturer"))
        if brand is None:
            brand = _script_brand(html, title, sku)
            sources["brand"] = "script"
        record = ProductRecord(
            url=url,
            product_name=title,
            description=_text(data.get("description")) or meta.get("og:description"),
            price=offers.price,
            currency=currency,
            original_price=offers.list_price if _is_discount(offers) else None,
            rating=rating,
            review_count=count,
            availability=availability,
            is_available=is_available,
            brand=brand,
            category=_category(data.get("category")) or visible.breadcrumb(tree),
            sku=sku,
            gtin=gtin,
            mpn=mpn,
            image_urls=images,
            parser_name=self.name,
            parser_version=self.version,
        )
        if record.description is not None and _text(data.get("description")) is None:
            sources["description"] = "meta"
        return check(record, sources)


def _candidates(tree: LexborHTMLParser) -> list[_Candidate]:
    found: list[_Candidate] = []
    for node, value in json_ld_blocks(tree):
        for obj, parent_key in walk_json(value):
            if has_type(obj, "Product") or has_type(obj, "ProductGroup"):
                nested = parent_key in _OTHER_PRODUCT_KEYS
                found.append(_Candidate(obj, node, nested, len(found)))
    for rdfa in (False, True):
        for node, item in embedded_items(tree, rdfa=rdfa):
            if has_type(item, "Product"):
                nested = node.attributes.get("property" if rdfa else "itemprop") is not None
                source = "rdfa" if rdfa else "microdata"
                found.append(_Candidate(item, node, nested, len(found), source))
    return found


def _refuse_or_accept(url: str, page_title: str | None, seen: visible.Evidence) -> None:
    """Raise ``NotProductPage`` unless the visible page shows one product: heading, price, offer."""
    # A listing shows its prices in tiles, each after the tile's link; so does its first price.
    listed = seen.price is not None and seen.price.in_card
    prices = {p.value for p in seen.prices if not p.struck and p.currency and p.in_card}
    reason = not_product_reason(url, page_title, seen.heading, len(prices) if listed else 0)
    if reason is None and (seen.heading is None or seen.price is None):
        reason = "no heading with a price next to it"
    # Structure first (a cart form or button, a quantity field), then a labelled item number,
    # then how surely the price is the heading's (currency, price-named element, closeness).
    offered = seen.buy_button or seen.quantity or seen.sku
    if reason is None and not (offered or seen.price.score >= 5.0):  # type: ignore[union-attr]
        reason = (
            "no add-to-cart button or form, quantity field, item number or priced offer right"
            " after its heading"
        )
    if reason is not None:
        raise NotProductPage(
            f"{url} has no product data (no schema.org Product, no product meta tags) and the "
            f"page itself does not show one product ({reason}): not a product page"
        )


def _complete(main: _Candidate | None, offers: OfferFacts) -> bool:
    """Whether the structured product names its price, stock and item number (``offers``: what
    its offers say)."""
    if main is None:
        return False
    named = any(main.data.get(key) for key in ("sku", "productID"))
    return bool(offers.price is not None and offers.availability and named)


def _canonical(tree: LexborHTMLParser) -> str | None:
    node = tree.css_first('link[rel="canonical"]')
    return node.attributes.get("href") if node is not None else None


def _in_other_products_block(node: LexborNode | None) -> bool:
    """Whether ``node`` sits in a recommendations / related-products container."""
    current = node.parent if node is not None else None
    for _ in range(_ANCESTOR_LEVELS):
        if current is None or current.tag in {"body", "html"}:
            break
        marker = f"{current.attributes.get('id') or ''} {current.attributes.get('class') or ''}"
        if _OTHER_PRODUCTS.search(marker):
            return True
        current = current.parent
    return False


def _pick_main(
    candidates: list[_Candidate], headings: list[str], meta: dict[str, str]
) -> _Candidate | None:
    """The page's own product: named like the heading/title, with an offer, not a decoy."""
    if not candidates:
        return None
    references = [*headings, meta.get("og:title") or "", meta.get("twitter:title") or ""]

    def score(candidate: _Candidate) -> float:
        data = candidate.data
        value = name_score(_text(data.get("name")), references)
        value += 2.0 if data.get("offers") else 0.0
        value += 0.5 if data.get("image") else 0.0
        value -= 3.0 if candidate.nested else 0.0
        value -= 5.0 if _in_other_products_block(candidate.node) else 0.0
        return value - 0.01 * candidate.order

    return max(candidates, key=score)


def _text(value: Any) -> str | None:
    """A schema.org text value (first of a list), HTML entities and tags removed."""
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str) and v.strip()), None)
    if isinstance(value, dict):
        value = value.get("name") or value.get("@value")
    if not isinstance(value, str):
        return None
    return clean(_TAGS.sub(" ", unescape(unescape(value))))


def _title(
    data: dict[str, Any], headings: list[str], titles: list[str], tree: LexborHTMLParser
) -> str | None:
    """The visible product title, checked against structured data and og:title (``titles``:
    what ``_page_titles`` gives)."""
    name = _text(data.get("name"))
    for title in titles:
        for heading in headings:
            if words(heading) == words(title):
                return heading  # heading and og:title agree: the shop's own title
        said = words(title)
        if name and len(words(name)) > len(said) and words(name)[-len(said) :] == said:
            return title  # the name carries a prefix ("Details about ...") the title lacks
    if name:
        for heading in headings:
            if words(heading) == words(name):
                return heading  # same words, the visible punctuation
        return name
    if titles:
        return titles[0]
    if headings:
        return headings[0]
    node = tree.css_first("title")
    return clean(_without_site_suffix(node.text())) if node is not None else None


def _without_site_suffix(title: str) -> str:
    """``title`` without a trailing " | Shop" / " - Shop" part (2-40 characters after the mark).

    Plain string operations: the regex this replaces backtracked quadratically on whitespace.
    """
    mark = max(title.rfind(sep) for sep in _SITE_SEPARATORS)
    if mark <= 0 or not title[mark - 1].isspace():
        return title
    suffix = title[mark + 1 :]
    if not suffix[:1].isspace() or not 2 <= len(suffix.lstrip()) <= 40 or len(suffix) < 3:
        return title
    return title[:mark].rstrip()


def _page_titles(meta: dict[str, str]) -> list[str]:
    """og:title / twitter:title, each also without a trailing " | Shop" part."""
    titles: list[str] = []
    for key in ("og:title", "twitter:title"):
        title = clean(meta.get(key))
        if title:
            short = clean(_without_site_suffix(title))
            titles.extend(t for t in (short, title) if t and t not in titles)
    return titles


def _meta_is_product(meta: dict[str, str]) -> bool:
    kind = meta.get("og:type", "")
    return "product" in kind.lower() or "product:price:amount" in meta or "og:price:amount" in meta


def _apply_meta_prices(offers: OfferFacts, meta: dict[str, str]) -> None:
    """Fill or correct the offer from product:price meta tags (sale vs standard amount)."""
    meta_price = to_decimal(meta.get("product:price:amount") or meta.get("og:price:amount"))
    meta_price = None if meta_price is not None and meta_price == 0 else meta_price  # placeholder
    standard = to_decimal(
        meta.get("og:price:standard_amount")
        or meta.get("product:original_price:amount")
        or meta.get("product:price:standard_amount")
    )
    if offers.price is None:
        offers.price = meta_price
    elif meta_price is not None and standard is not None and offers.price == standard:
        # Structured data shows the regular price; the meta tags say it is on sale.
        offers.price = meta_price if meta_price < standard else offers.price
    if offers.list_price is None and standard is not None:
        offers.list_price = standard


def _is_discount(offers: OfferFacts) -> bool:
    return offers.list_price is not None and (
        offers.price is None or offers.list_price > offers.price
    )


_META_STOCK = {
    "instock": "InStock",
    "available": "InStock",
    "availablefororder": "InStock",
    "preorder": "PreOrder",
    "backorder": "BackOrder",
    "oos": "OutOfStock",
    "outofstock": "OutOfStock",
    "soldout": "SoldOut",
    "discontinued": "Discontinued",
}


def _meta_availability(meta: dict[str, str]) -> str | None:
    value = meta.get("product:availability") or meta.get("og:availability")
    if not value:
        return None
    key = value.rsplit("/", 1)[-1].replace(" ", "").replace("_", "").replace("-", "").lower()
    return _META_STOCK.get(key, value)


def _loose_availability(tree: LexborHTMLParser) -> str | None:
    """A schema.org availability the page states outside a recognised Product item (an Offer of
    its own, a ``<link itemprop=availability>`` left in the buy box), not in a related block."""
    for node in tree.css("[itemprop=availability], [property$=availability]")[:20]:
        attrs = node.attributes
        value = attrs.get("href") or attrs.get("content") or attrs.get("resource")
        if value is None and node.tag not in {"link", "meta"}:
            value = node.text(deep=False)
        key = (value or "").rsplit("/", 1)[-1].replace(" ", "").replace("_", "").lower()
        if key in _META_STOCK and not _in_other_products_block(node):
            return _META_STOCK[key]
    return None


def is_available_from(availability: str | None) -> bool | None:
    """Whether a schema.org availability (``InStock``, ``https://schema.org/SoldOut``, …) says the
    product can be bought; None for a value it does not name."""
    if not availability:
        return None
    key = availability.rsplit("/", 1)[-1].replace(" ", "").lower()
    if key in {"instock", "limitedavailability", "onlineonly", "instoreonly", "preorder"}:
        return True
    if key in {"presale", "backorder", "madetoorder"}:
        return True
    if key in {"outofstock", "soldout", "discontinued", "reserved"}:
        return False
    return None


def _brand(value: Any) -> str | None:
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, dict):
        value = value.get("name")
    return _text(value) if isinstance(value, str) else None


def _category(value: Any) -> str | None:
    """schema.org ``category`` as written by the shop ("Home > Lighting")."""
    return _text(value) if isinstance(value, str) else None


# A struck-through / former price: markup (<del>, line-through, "old", "was" ...) or a label.
_STRUCK_TAGS = frozenset({"del", "s", "strike"})
_STRUCK_MARK = re.compile(
    r"line-?through|strike|old|was|list|regular|original|before|compare|rrp|uvp|msrp"
    r"|suggested|crossed|previous|antes|statt",
    re.IGNORECASE,
)
_LIST_LABEL = re.compile(
    r"^(?:was|uvp|rrp|msrp|list price|list|de|antes|statt|prix conseillé|regular|reg\.?)\b",
    re.IGNORECASE,
)
_NOT_LIST = re.compile(
    r"save|saving|economi|desconto|discount|rabatt|spar|sconto|\d\s*%|\bx\s*de\b|/\s*m[eê]s"
    r"|per month|shipping|delivery|frete|versand|from\b|ab\b|a partir",
    re.IGNORECASE,
)
_NEIGHBOURHOOD_CHARS = 400
_SCRIPT_LIST_PRICE = re.compile(
    r'"(?:original|list|old|regular|was|compare|base)_?price"\s*:\s*'
    r'(?:\{[^{}]{0,80}?"value"\s*:\s*)?"?(\d[\d.,]*)',
    re.IGNORECASE,
)


def _marked_struck(node: LexborNode, stop: LexborNode) -> bool:
    """Whether ``node`` or an ancestor below ``stop`` is styled or named as a former price."""
    current: LexborNode | None = node
    for _ in range(_ANCESTOR_LEVELS):
        if current is None or current.mem_id == stop.mem_id:
            break
        if current.tag in _STRUCK_TAGS:
            return True
        attrs = current.attributes
        marker = " ".join(v or "" for k, v in attrs.items() if k not in {"href", "src"})
        if _STRUCK_MARK.search(marker):
            return True
        current = current.parent
    return False


def _price_nodes(
    texts: Iterable[tuple[LexborNode, str]], main: _Candidate | None, price: Decimal
) -> list[LexborNode]:
    """Elements showing the product's price: its itemprop=price, else texts equal to it among
    ``texts`` (the ones read around the heading)."""
    if main is not None and main.node is not None and main.node.tag != "script":
        found = [n for n in main.node.css('[itemprop="price"]') if n.tag != "meta"]
        if found:
            return found[:3]
    # The last digits of the whole amount show in any format ("1.299,90", "1 299"): a cheap
    # test before parsing the text as a price. (int() of a million-digit amount is quadratic.)
    digits = str(int(price))[-3:] if price.adjusted() < 16 else ""
    nodes: list[LexborNode] = []
    for node, text in texts:
        if len(text) < 40 and digits in text and parse_price(text) == price:
            parent = node.parent
            if parent is not None and parent.tag not in {"script", "style", "option"}:
                nodes.append(parent)
                if len(nodes) == 3:
                    break
    return nodes


def _visible_list_price(
    texts: Iterable[tuple[LexborNode, str]],
    main: _Candidate | None,
    price: Decimal,
    currency: str | None,
) -> Decimal | None:
    """A struck / "Was" price shown right next to the product's price."""
    for anchor in _price_nodes(texts, main, price):
        block = anchor
        for _ in range(5):
            parent = block.parent
            if parent is None or len(parent.text()) > _NEIGHBOURHOOD_CHARS:
                break
            block = parent
        for node in block.traverse(include_text=True):
            if not node.is_text_node or node.parent is None:
                continue
            text = clean(node.text(deep=False))
            if not text or len(text) > 40:
                continue
            # The amount first: most texts hold none above the price, and ``_NOT_LIST`` is the
            # dearer test (both only skip the text; ``price * 10`` cannot overflow here, as a
            # 40-character text is never above a price that large).
            value = parse_price(text)
            if value is None or not price < value <= price * 10 or _NOT_LIST.search(text):
                continue
            shown = detect_currency(text)
            if currency and shown and shown != currency:
                continue  # "Approximately US $2.66": a conversion, not a former price
            if _marked_struck(node.parent, block) or _LIST_LABEL.search(text):
                return value
    return None


def _script_list_price_matches(html: str) -> Iterator[re.Match[str]]:
    """``_SCRIPT_LIST_PRICE`` matches in page order, found from each ``price"`` in the page: a
    plain substring search, where the pattern alone tries every quote of a JSON-heavy page."""
    starts: list[int] = []
    for needle in ('rice"', 'RICE"'):
        at = html.find(needle)
        while at >= 0:
            starts.append(at)
            at = html.find(needle, at + 1)
    for at in sorted(starts):
        # The key starts at most 11 characters before "rice" ('"original_p'); the value follows.
        match = _match_by(html, max(0, at - 12), at, at + 200)
        if match is not None and at < match.end():
            yield match


def _match_by(html: str, start: int, last: int, end: int) -> re.Match[str] | None:
    """What ``_SCRIPT_LIST_PRICE.search(html, start, end)`` finds if it starts by ``last`` (else
    None). The pattern opens with a quote: it is tried at the few quotes up to ``last``, where a
    search would go on through every quote up to ``end``."""
    quote = html.find('"', start, last + 1)
    while quote >= 0:
        match = _SCRIPT_LIST_PRICE.match(html, quote, end)
        if match is not None:
            return match
        quote = html.find('"', quote + 1, last + 1)
    return None


def _script_list_price(html: str, price: Decimal) -> Decimal | None:
    """A list price from embedded shop JSON, only where the same object holds the price."""
    for match in _script_list_price_matches(html):
        value = parse_price(match.group(1))
        if value is None or not price < value <= price * 10:
            continue
        window = html[max(0, match.start() - 300) : match.end() + 300]
        numbers = (parse_price(m) for m in re.findall(r":\s*\"?(\d[\d.,]*)", window))
        if price in numbers:
            return value
    return None


_IMAGE_SOURCE_ATTRS = ("data-zoom-image", "data-large", "data-zoom", "data-src", "src")


def _alt_gallery(tree: LexborHTMLParser, title: str, url: str) -> list[str]:
    """Images the page labels with the product's own name (alt/title text), in page order."""
    body = tree.body
    if body is None:
        return []
    found: list[str] = []
    for node in body.css("img[alt], img[title]"):
        attrs = node.attributes
        label = attrs.get("alt") or attrs.get("title")
        if not label or name_score(label, [title]) < 2.5:
            continue
        source = next((v for a in _IMAGE_SOURCE_ATTRS if (v := attrs.get(a))), None)
        if source and not source.strip().startswith("data:") and "logo" not in source.lower():
            found.append(absolute_url(unescape(source), url))
    return found


# "4.7 out of 5", "4,5 de 5", "4,5 von 5", "4,5 sur 5", "4,5 su 5" (screen-reader text included).
_RATING_WORDS = ("out of", "de", "von", "sur", "su", "di", "z", "av", "van")
_RATING_TEXT = re.compile(
    rf"(?<![\d.,])([0-5](?:[.,]\d{{1,2}})?)\s*(?:{'|'.join(_RATING_WORDS)})\s*5(?![\d.,])",
    re.IGNORECASE,
)


def _visible_rating(window: list[tuple[LexborNode, str]]) -> Decimal | None:
    """The first "X out of 5" rating text around the heading, outside recommendation blocks."""
    for node, text in window:
        if len(text) > 80 or "5" not in text or not (match := _RATING_TEXT.search(text)):
            continue
        parent = node.parent
        if parent is None or parent.tag in {"script", "style"} or _in_other_products_block(node):
            continue
        return Decimal(match.group(1).replace(",", "."))
    return None


_SCRIPT_BRAND = re.compile(r'"(?:brand|brandName|brand_name)"\s*:\s*"([^"\\]{1,80})"')


def _script_brand(html: str, title: str, sku: str | None) -> str | None:
    """A brand from embedded shop JSON, only where the same object names this product."""
    needles = [json.dumps(title, ensure_ascii=False)[1:-1], json.dumps(title)[1:-1]]
    if sku:
        needles.append(f'"{sku}"')
    for match in _SCRIPT_BRAND.finditer(html):
        window = _enclosing_object(html, match.start())
        if any(needle in window for needle in needles) and (brand := clean(match.group(1))):
            return brand
    return None


def _enclosing_object(text: str, at: int, reach: int = 3000) -> str:
    """The ``{...}`` around position ``at`` in embedded JSON/JS (within ``reach`` characters)."""
    depth, start = 0, None
    for i in range(at, max(-1, at - reach), -1):
        char = text[i]
        if char == "}":
            depth += 1
        elif char == "{":
            if depth == 0:
                start = i
                break
            depth -= 1
    if start is None:
        return ""
    depth = 0
    for i in range(start, min(len(text), start + 2 * reach)):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return text[start : start + 2 * reach]
