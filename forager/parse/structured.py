"""Markup helpers shared by the parsers: visible text, URLs, JSON-LD, microdata, RDFa, meta."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from html import unescape
from typing import Any
from urllib.parse import urljoin, urlsplit

from selectolax.lexbor import LexborHTMLParser, LexborNode

from forager.parse.prices import normalize_currency, to_decimal

_INVISIBLE_TAGS = frozenset({"script", "style", "noscript", "template"})
# Control characters some shops leave inside JSON-LD strings (json.loads rejects them).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
# What ``json.loads(text, parse_float=Decimal, strict=False)`` builds on every call.
_JSON_LD = json.JSONDecoder(parse_float=Decimal, strict=False)


def clean(text: str | None) -> str | None:
    """Whitespace collapsed and trimmed; None for empty text (never "")."""
    if text is None:
        return None
    # str.split() splits on what ``\s`` matches (str.isspace), several times faster than a sub.
    collapsed = " ".join(text.split())
    return collapsed or None


def visible_text(node: LexborNode) -> str:
    """Text a shopper sees in ``node``: script/style contents left out."""
    # A selector query costs more than reading a few children: an element holding text only
    # matches the selector just when it is a script/style itself.
    holds_text_only = node.tag not in _INVISIBLE_TAGS and not _has_element_child(node)
    if holds_text_only or not node.css_first("script, style, noscript, template"):
        return node.text(separator=" ")
    parts: list[str] = []
    for child in node.traverse(include_text=True):
        if child.is_text_node:
            parent = child.parent
            if parent is not None and parent.tag not in _INVISIBLE_TAGS:
                parts.append(child.text(deep=False))
    return " ".join(parts)


# An absolute http(s) URL that ``urljoin`` returns as it is: a host, then no query, fragment,
# ";" parameters, brackets or tab / line breaks (which urlsplit rewrites, drops or checks).
_PLAIN_ABSOLUTE = re.compile(r"https?://[^/?#;\[\]\t\r\n][^?#;\[\]\t\r\n]*")


def _has_element_child(node: LexborNode) -> bool:
    """Whether ``node`` has a child other than text (an element, a comment ...)."""
    child = node.child
    while child is not None:
        if not child.is_text_node:
            return True
        child = child.next
    return False


def absolute_url(value: str, base: str) -> str:
    """``value`` resolved against the page URL (protocol-relative and relative paths)."""
    value = value.strip()
    if not base:
        return value
    # Most image URLs are absolute already: no need to split and rebuild them (urljoin still
    # runs when the base URL might make it raise, as a non-ASCII or bracketed host does).
    if _PLAIN_ABSOLUTE.fullmatch(value) and value.isascii() and _plain_base(base):
        return value
    return urljoin(base, value)


def _plain_base(base: str) -> bool:
    """Whether ``urljoin`` parses ``base`` without a ValueError (ASCII, no IPv6 brackets)."""
    return base.isascii() and "[" not in base and "]" not in base


def json_ld_blocks(tree: LexborHTMLParser) -> list[tuple[LexborNode, Any]]:
    """Every parsed JSON-LD block with its <script> (numbers as Decimal, broken ones skipped)."""
    blocks: list[tuple[LexborNode, Any]] = []
    for node in tree.css('script[type="application/ld+json"]'):
        text = node.text(deep=True).strip()
        if not text:
            continue
        text = _CONTROL.sub(" ", text)
        if text.startswith("<!--"):
            text = text.removeprefix("<!--").removesuffix("-->").strip()
        if text.startswith("\ufeff"):
            continue  # json.loads refuses a byte-order mark (and the decoder fails on it)
        try:
            blocks.append((node, _JSON_LD.decode(text)))
        except (ValueError, RecursionError):
            continue  # broken, or nested deeper than the JSON decoder recurses
    return blocks


_CONTAINERS = (dict, list)


def walk_json(value: Any) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Every dict inside a JSON value with the key it sits under, outermost first."""
    stack: list[tuple[Any, str | None]] = [(value, None)]
    while stack:
        current, key = stack.pop()
        # Only dicts and lists are stacked: a string or number would be popped for nothing.
        if isinstance(current, dict):
            yield current, key
            stack.extend(
                reversed([(v, k) for k, v in current.items() if isinstance(v, _CONTAINERS)])
            )
        elif isinstance(current, list):
            stack.extend(reversed([(v, key) for v in current if isinstance(v, _CONTAINERS)]))


def has_type(obj: dict[str, Any], wanted: str) -> bool:
    """Whether a JSON-LD object's @type is ``wanted`` (plain or schema.org URL, list or string)."""
    types = obj.get("@type")
    if isinstance(types, str):  # the common case, without building a list
        return types.rsplit("/", 1)[-1] == wanted
    values = types if isinstance(types, list) else [types]
    return any(isinstance(t, str) and t.rsplit("/", 1)[-1] == wanted for t in values)


def meta_content(tree: LexborHTMLParser) -> dict[str, str]:
    """``<meta property|name|itemprop=... content=...>`` values, first one per key (lower-case)."""
    found: dict[str, str] = {}
    for node in tree.css("meta[content]"):
        attrs = node.attributes
        key = attrs.get("property") or attrs.get("name")
        content = attrs.get("content")
        if key and content and content.strip():
            found.setdefault(key.strip().lower(), content.strip())
    return found


def _prop_value(node: LexborNode, text_budget: int) -> Any:
    """A microdata/RDFa property's value: content attribute, URL attribute or text."""
    attrs = node.attributes
    if attrs.get("content") is not None:
        return attrs.get("content")
    tag = node.tag
    if tag in {"a", "link", "area"}:
        return attrs.get("href")
    if tag in {"img", "audio", "video", "source", "embed", "iframe"}:
        return attrs.get("src") or attrs.get("data-src")
    if tag == "meta":
        return attrs.get("content")
    if tag == "time" and attrs.get("datetime"):
        return attrs.get("datetime")
    if tag in {"data", "meter"} and attrs.get("value") is not None:
        return attrs.get("value")
    return clean(visible_text(node)) if text_budget > 0 else None


def local_name(value: str) -> str:
    """ "http://schema.org/Product" / "schema:Product" -> "Product"."""
    return value.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].rsplit("#", 1)[-1]


# Text read from microdata/RDFa property elements, in characters per page. Nested property
# elements each hold their descendants' text, so 10,000 nested ones would read the page 10,000
# times; past this budget text values are left out (a real page reads a few kilobytes).
_PROPERTY_TEXT_BUDGET = 2_000_000


def embedded_items(tree: LexborHTMLParser, rdfa: bool = False) -> list[tuple[LexborNode, Any]]:
    """Microdata (or RDFa) items as JSON-LD-like dicts, each with its element, in page order.

    A property belongs to its nearest enclosing item; an element that is itself an item is the
    value of its parent's property, so nested offers/ratings come out nested as in JSON-LD.
    """
    scope_attr, prop_attr, type_attr = (
        ("typeof", "property", "typeof") if rdfa else ("itemscope", "itemprop", "itemtype")
    )
    scopes = tree.css(f"[{scope_attr}]")
    if not scopes:
        return []
    items: dict[int, dict[str, Any]] = {}
    for scope in scopes:
        kind = scope.attributes.get(type_attr) or ""
        items[scope.mem_id] = {"@type": [local_name(t) for t in kind.split()] or None}
    owner_of = _OwnerLookup(items)
    budget = _PROPERTY_TEXT_BUDGET
    for node in tree.css(f"[{prop_attr}]"):
        owner = owner_of(node)
        if owner is None:
            continue  # e.g. <meta property="og:title">: not inside any item
        if node.mem_id in items:
            value = items[node.mem_id]
        else:
            value = _prop_value(node, budget)
            budget -= len(value) if isinstance(value, str) else 0
        for name in (node.attributes.get(prop_attr) or "").split():
            key = local_name(name)
            target = items[owner]
            if key in target:
                existing = target[key]
                target[key] = (
                    [*existing, value] if isinstance(existing, list) else [existing, value]
                )
            else:
                target[key] = value
    return [(scope, items[scope.mem_id]) for scope in scopes]


class _OwnerLookup:
    """The nearest enclosing item of an element, each ancestor walked once per page."""

    def __init__(self, items: dict[int, dict[str, Any]]) -> None:
        self._items = items
        self._owner: dict[int, int | None] = {}  # element id -> its nearest item's id

    def __call__(self, node: LexborNode) -> int | None:
        path: list[int] = []
        found: int | None = None
        current = node.parent
        while current is not None:
            key = current.mem_id
            if key in self._items:
                found = key
                break
            if key in self._owner:
                found = self._owner[key]
                break
            path.append(key)
            current = current.parent
        for key in path:
            self._owner[key] = found
        return found


@dataclass(slots=True)
class OfferFacts:
    """What a schema.org ``offers`` value says: price, list price, currency, availability."""

    price: Decimal | None = None
    list_price: Decimal | None = None
    currency: str | None = None
    availability: str | None = None


_LIST_PRICE_TYPES = ("ListPrice", "StrikethroughPrice", "MSRP", "SRP", "InvoicePrice")
_IN_STOCK = ("InStock", "LimitedAvailability", "OnlineOnly", "InStoreOnly", "PreOrder")


def _lower_keys(obj: dict[str, Any]) -> dict[str, Any]:
    """Keys lower-cased: shops write lowPrice / lowprice / LowPrice."""
    return {k.lower(): v for k, v in obj.items()}


def _amount(value: Any, currency: str | None = None) -> Decimal | None:
    """A price that may be a number, a string or an object ({"sales": {"value": 3499}});
    ``currency``: the offer's, for "5.000" in a currency without minor units (CLP)."""
    if isinstance(value, dict):
        low = _lower_keys(value)
        for key in ("sales", "value", "decimalprice", "amount", "price", "min"):
            if key in low and (found := _amount(low[key], currency)) is not None:
                return found
        return None
    if isinstance(value, list):
        return next((a for v in value if (a := _amount(v, currency)) is not None), None)
    return to_decimal(value, currency)


def _currency_in(value: Any) -> str | None:
    if isinstance(value, dict):
        low = _lower_keys(value)
        for key in ("pricecurrency", "currency"):
            if (code := normalize_currency(low.get(key))) is not None:
                return code
        return next((c for v in value.values() if (c := _currency_in(v)) is not None), None)
    return None


def _offer_list(offers: Any) -> list[dict[str, Any]]:
    """Offers flattened: a dict, a list, or an AggregateOffer holding more offers."""
    items = offers if isinstance(offers, list) else [offers]
    flat: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, dict):
            flat.append(item)
            inner = item.get("offers")
            if isinstance(inner, dict | list):
                flat.extend(_offer_list(inner))
    return flat


def _offer_prices(
    offer: dict[str, Any], currency: str | None
) -> tuple[Decimal | None, Decimal | None]:
    """(price, list price) of one offer, from price / lowPrice / priceSpecification. A price of
    0 is a placeholder, not a price."""
    low = _lower_keys(offer)
    price = _not_placeholder(_amount(low.get("price"), currency))
    if price is None:
        price = _not_placeholder(_amount(low.get("lowprice"), currency))
    list_price = None
    specs = low.get("pricespecification")
    for spec in specs if isinstance(specs, list) else [specs]:
        if not isinstance(spec, dict):
            continue
        kind = str(spec.get("priceType") or "")
        amount = _not_placeholder(_amount(spec.get("price"), currency))
        if any(t in kind for t in _LIST_PRICE_TYPES):
            list_price = list_price or amount
        elif price is None:
            price = amount
    return price, list_price


def _not_placeholder(amount: Decimal | None) -> Decimal | None:
    """``amount`` unless it is 0: a shop's placeholder for "no price" ("0.00" in its data on
    a page whose price is shown elsewhere or not at all). A negative one is kept as extracted,
    for validation to name."""
    return None if amount is not None and amount == 0 else amount


def offer_facts(offers: Any) -> OfferFacts:
    """Price facts from a Product's ``offers``; several offers (sizes) -> the commonest price."""
    facts = OfferFacts()
    flat = _offer_list(offers)
    prices: list[Decimal] = []
    for offer in flat:
        currency = _currency_in(offer)
        price, list_price = _offer_prices(offer, currency or facts.currency)
        if price is not None:
            prices.append(price)
        facts.list_price = facts.list_price or list_price
        facts.currency = facts.currency or currency
    if len(prices) == 1:
        facts.price = prices[0]  # what the count below finds, without building a Counter
    elif prices:
        facts.price = Counter(prices).most_common(1)[0][0]
    states = [str(o.get("availability") or "").rsplit("/", 1)[-1] for o in flat]
    states = [s for s in states if s]
    facts.availability = next((s for s in states if s in _IN_STOCK), states[0] if states else None)
    return facts


def rating_facts(value: Any) -> tuple[Decimal | None, int | None]:
    """(rating out of 5, count) from an AggregateRating; other scales are rescaled to 5."""
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, dict):
        return None, None
    rating = _amount(value.get("ratingValue"))
    best = _amount(value.get("bestRating"))
    if rating is not None and best is not None and best > 5:
        rating = rating * 5 / best
    # A rating outside 0-5 is kept as written: validation lists it, nothing "fixes" it.
    count: int | None = None
    for key in ("ratingCount", "reviewCount"):
        raw = value.get(key)
        digits = re.sub(r"\D", "", str(raw)) if raw is not None else ""
        if digits:
            count = int(digits)
            break
    return rating, count


def product_images(value: Any, base: str) -> list[str]:
    """Absolute, de-duplicated image URLs from a schema.org ``image`` (string/list/ImageObject)."""
    items = value if isinstance(value, list) else [value]
    urls: list[str] = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("contentUrl") or item.get("url")
        if isinstance(item, str) and item.strip() and not item.strip().startswith("data:"):
            url = absolute_url(unescape(item), base)
            if url not in urls:
                urls.append(url)
    return urls


# Tokens of an image path that name a rendition, not the picture: sizes (500x500, s-l300, w800),
# and size words shops put in file names (thumb, zoom, large, ...).
_RENDITION = re.compile(
    r"^(?:\d{2,4}x\d{2,4}|[swhl]-?\d{2,4}|[1-9]\d{1,3}|[a-z]|gg|xs|xl|xxl|sq|thumb|thumbnail|small|medium"
    r"|large|big|zoom|cart|mini|hires|hi-res|original|full|fullxfull|jpe?g|png|webp|gif)$",
    re.IGNORECASE,
)
_PATH_TOKENS = re.compile(r"[/_.\-+ ]+|%20|%5e", re.IGNORECASE)
_ID_DIGITS = 5  # a path token with this many digits names the picture (or its product)
# Video thumbnails listed among product images (YouTube / Vimeo stills).
_VIDEO_STILL = re.compile(r"//(?:i\d?\.ytimg\.com|img\.youtube\.com|i\.vimeocdn\.com)/", re.I)


def image_key(url: str) -> str:
    """The picture an image URL shows, whatever the rendition.

    Size tokens are dropped; when the path carries an id (a token with 5+ digits), the last such
    id and what follows it name the picture, so CDN hashes in front of it do not count.
    """
    parts = urlsplit(url)
    tokens = [t.lower() for t in _PATH_TOKENS.split(parts.path) if t]
    tokens = [t for t in tokens if not _RENDITION.match(t)]
    ids = [i for i, t in enumerate(tokens) if sum(map(str.isdigit, t)) >= _ID_DIGITS]
    if ids:
        tokens = tokens[ids[-1] :]
    return f"{parts.hostname or ''}/{'/'.join(tokens)}"


def distinct_images(urls: list[str]) -> list[str]:
    """One URL per picture (first rendition kept), video stills left out."""
    seen: set[str] = set()
    kept: list[str] = []
    for url in urls:
        key = image_key(url)
        if key not in seen and not _VIDEO_STILL.search(url):
            seen.add(key)
            kept.append(url)
    return kept
