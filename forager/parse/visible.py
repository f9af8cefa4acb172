"""What a shopper sees of the product: heading, the price tied to it, stock, item number.

The generic parser reads this when a page has no structured data, and to cross-check structured
data that disagrees with the page. Everything is found from the page's own shape — the main
heading, the text that follows it, how elements are named — never from rules for one shop.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from html import unescape
from itertools import chain
from urllib.parse import unquote, urlsplit

from selectolax.lexbor import LexborHTMLParser, LexborNode

from forager.parse import signals
from forager.parse.prices import detect_currency, parse_price
from forager.parse.structured import clean

# Text nodes read after the main heading (and before it) when looking for the product's price,
# stock and item number: the buy box sits next to the heading on every layout we know.
_AFTER_HEADING = 400
_CHECK_AFTER_HEADING = 150  # enough to cross-check complete structured data (its buy box)
_BEFORE_HEADING = 60
_PRICE_CHARS = 40  # a price text is short ("R$ 1.299,90", "Now £36.50")
_PRICE_NEIGHBOURS = 8  # text nodes between a struck price and the current price beside it
_ANCESTOR_LEVELS = 12  # how far up an element's name (class / id) says what it is
_WORD = re.compile(r"\w+")
# A text that may start with an item-number label (checked before the full label patterns).
_DIGIT = re.compile(r"\d")
_DIGIT_RUN = re.compile(r"\d+")
_LETTERS = re.compile(r"[^\W\d_]")
# At least six / four letters (the same class), found without listing every letter.
_SIX_LETTERS = re.compile(r"(?:[^\W\d_][\W\d_]*){6}")
_FOUR_LETTERS = re.compile(r"(?:[^\W\d_][\W\d_]*){4}")
_FALLBACK_HEADINGS = 400  # heading-like elements tried when a page has no <h1>
_INVISIBLE = frozenset({"script", "style", "noscript", "template", "title", "head"})


@dataclass(slots=True)
class PriceSeen:
    """One price text on the page and how strongly it belongs to the product."""

    value: Decimal
    currency: str | None
    text: str
    score: float
    struck: bool
    position: int
    in_card: bool = False  # after the heading, right after a link's text (a listing's tile)
    net: bool = False  # labelled as before tax ("zzgl. MwSt.", "bez DPH", "HT")

    def near(self, other: PriceSeen) -> bool:
        """Whether the two prices sit in one price block (a few texts apart)."""
        return abs(self.position - other.position) <= _PRICE_NEIGHBOURS


@dataclass(slots=True)
class Evidence:
    """What the visible page says about its product (None: the page does not say)."""

    heading: str | None = None
    price: PriceSeen | None = None
    prices: list[PriceSeen] = field(default_factory=list)  # every price near the heading
    sold_out: bool = False  # a short "sold out" text next to the heading
    sold_out_stated: bool = False  # ... inside an element named as the stock / availability
    in_stock_text: bool = False
    buy_button: bool = False
    quantity: bool = False  # a quantity field: how many to buy
    sku: str | None = None
    global_id: str | None = None  # a labelled EAN / GTIN / UPC
    mpn: str | None = None  # a labelled manufacturer part number
    form_id: str | None = None  # a hidden sku / product_id field of the page's form
    # The text nodes read around the heading, in page order, with their text.
    window: list[tuple[LexborNode, str]] = field(default_factory=list)
    # Only the texts that may show the expected price were read as prices (``read``'s
    # ``expect``): ``prices`` holds those, and the page shows that price, not struck.
    prices_expected: bool = False

    @property
    def labels_read(self) -> bool:
        """Whether every labelled identifier has been found (no more labels to read)."""
        return None not in (self.sku, self.global_id, self.mpn)

    @property
    def in_stock(self) -> bool | None:
        """False when the page says sold out; True when it offers the product; else None."""
        if self.sold_out:
            return False
        if self.buy_button or self.in_stock_text:
            return True
        return None


class _Names:
    """Per page: the class / id / itemprop "name" of elements and whether they are aside blocks."""

    def __init__(self) -> None:
        self._aside: dict[int, bool] = {}
        # Class strings repeat all over a page: each (name, pattern) is searched once.
        self._found: dict[tuple[str, str], bool] = {}
        # Lower-cased, by element: reading attributes is not free.
        self._markers: dict[int, str] = {}

    @staticmethod
    def marker(node: LexborNode) -> str:
        attrs = node.attributes
        return " ".join([v or "" for k, v in attrs.items() if k in {"class", "id", "itemprop"}])

    def says(self, node: LexborNode, names: re.Pattern[str]) -> bool:
        """Whether ``node``'s name (class / id / itemprop) contains one of the words ``names``
        finds (``signals.ASIDE_NAMED`` ...)."""
        key = node.mem_id
        marker = self._markers.get(key)
        if marker is None:
            marker = self._markers[key] = self.marker(node).strip().lower()
        if not marker:
            return False
        seen = (marker, names.pattern)
        found = self._found.get(seen)
        if found is None:
            found = self._found[seen] = names.search(marker) is not None
        return found

    def aside(self, node: LexborNode) -> bool:
        """Whether ``node`` sits in a related-products / cart / header / footer block."""
        path: list[int] = []
        current: LexborNode | None = node
        found = False
        for _ in range(40):
            if current is None:
                break
            tag = current.tag
            if tag in {"body", "html"}:
                break
            key = current.mem_id
            if key in self._aside:
                found = self._aside[key]
                break
            path.append(key)
            if (
                tag in signals.ASIDE_TAGS
                or self.says(current, signals.ASIDE_NAMED)
                or _hidden(current)
            ):
                found = True
                break
            current = current.parent
        for key in path:
            self._aside[key] = found
        return found

    def variant(self, node: LexborNode) -> bool:
        """Whether ``node`` sits in a size / colour / variant picker (a few levels up)."""
        current: LexborNode | None = node
        for _ in range(4):
            if current is None:
                return False
            tag = current.tag
            if tag == "body":
                return False
            if tag in signals.VARIANT_TAGS or self.says(current, signals.VARIANT_NAMED):
                return True
            current = current.parent
        return False

    def named(self, node: LexborNode, names: re.Pattern[str], levels: int = 3) -> bool:
        current: LexborNode | None = node
        for _ in range(levels):
            if current is None or current.tag == "body":
                return False
            if self.says(current, names):
                return True
            current = current.parent
        return False


_HIDDEN_CLASSES = frozenset({"hidden", "hide", "d-none", "is-hidden", "invisible", "display-none"})


def _hidden(node: LexborNode) -> bool:
    """Hidden by the markup itself (``hidden``, ``display:none``, a "hidden" class)."""
    attrs = node.attributes
    if "hidden" in attrs:
        return True
    style = (attrs.get("style") or "").replace(" ", "").lower()
    if "display:none" in style or "visibility:hidden" in style:
        return True
    return not _HIDDEN_CLASSES.isdisjoint((attrs.get("class") or "").lower().split())


def words(text: str | None) -> tuple[str, ...]:
    """Lower-case words of a text (entities decoded), for comparing names."""
    return tuple(_WORD.findall(unescape(text or "").lower()))


def name_score(name: str | None, references: list[str]) -> float:
    """How well a product name matches the page's heading / title texts (0..4)."""
    mine = words(name)
    if not mine:
        return 0.0
    mine_text, mine_set = " ".join(mine), set(mine)  # the same for every reference
    best = 0.0
    for reference in references:
        ref = words(reference)
        if not ref:
            continue
        if ref == mine:
            return 4.0
        ref_text, ref_set = " ".join(ref), set(ref)
        if mine_text in ref_text or ref_text in mine_text:
            best = max(best, 3.0)
        overlap = len(mine_set & ref_set) / len(mine_set | ref_set)
        best = max(best, 3.0 * overlap)
    return best


def main_heading(tree: LexborHTMLParser, references: list[str]) -> LexborNode | None:
    """The product's heading: the <h1> most like the page title (the first one on a tie)."""
    best: tuple[float, LexborNode] | None = None
    for node in tree.css("h1"):
        text = clean(node.text(separator=" "))
        if not text or len(text) > 300:
            continue
        score = name_score(text, references) if references else 1.0
        if best is None or score > best[0]:
            best = (score, node)
    if best is not None and (best[0] >= 1.0 or not references):
        return best[1]
    # No <h1>, or only one that has little to do with the page title ("Sale", the shop's
    # name): the first heading-like element named like the page title.
    selector = "h2, h3, [itemprop=name], [class*=title], [class*=name], [id*=title]"
    for node in tree.css(selector)[:_FALLBACK_HEADINGS]:
        text = clean(node.text(separator=" "))
        if text and len(text) <= 300 and name_score(text, references) >= 3.0:
            return node
    return best[1] if best is not None else None


def _window(
    body: LexborNode, heading: LexborNode | None, reach: int, back: int
) -> tuple[list[LexborNode], int]:
    """Visible text nodes around the heading in page order, and where the heading starts.

    The walk starts at the heading and goes forward until ``reach`` texts are read and back
    until ``back`` texts are, so a page costs no more than the part around its heading.
    """
    if heading is None or not _inside(heading, body):
        return _texts(body.traverse(include_text=True), reach), 0
    before = _texts(_backward(heading, body), back)
    before.reverse()
    after = _texts(_forward(heading, body), reach)
    return [*before, *after], len(before)


def _inside(node: LexborNode, body: LexborNode) -> bool:
    current: LexborNode | None = node
    while current is not None:
        if current.mem_id == body.mem_id:
            return True
        current = current.parent
    return False


def _texts(nodes: Iterator[LexborNode], limit: int) -> list[LexborNode]:
    """The first ``limit`` visible text nodes of ``nodes`` (read no further)."""
    found: list[LexborNode] = []
    if limit <= 0:
        return found
    for node in nodes:
        if not node.is_text_node:
            continue
        parent = node.parent
        if parent is None or parent.tag in _INVISIBLE:
            continue
        found.append(node)
        if len(found) >= limit:
            break
    return found


def _forward(heading: LexborNode, body: LexborNode) -> Iterator[LexborNode]:
    """The heading and every node after it in page order, up to the end of ``body``."""
    # Chained in C: a generator here would resume once per node of the page.
    subtrees = (node.traverse(include_text=True) for node in _following(heading, body))
    return chain(heading.traverse(include_text=True), chain.from_iterable(subtrees))


def _following(heading: LexborNode, body: LexborNode) -> Iterator[LexborNode]:
    """The siblings after the heading and after each of its ancestors below ``body``."""
    current: LexborNode | None = heading
    while current is not None and current.mem_id != body.mem_id:
        sibling = current.next
        while sibling is not None:
            yield sibling
            sibling = sibling.next
        current = current.parent


def _backward(heading: LexborNode, body: LexborNode) -> Iterator[LexborNode]:
    """The nodes before the heading inside ``body``, nearest first (reverse page order)."""
    current: LexborNode | None = heading
    while current is not None and current.mem_id != body.mem_id:
        sibling = current.prev
        while sibling is not None:
            stack = [sibling]
            while stack:  # the sibling's subtree, last node first
                node = stack.pop()
                yield node
                child = node.child
                while child is not None:
                    stack.append(child)
                    child = child.next
            sibling = sibling.prev
        current = current.parent


def _price_at(
    element: LexborNode, text: str, names: _Names, position: int, url: str
) -> PriceSeen | None:
    """The price a text node of ``element`` shows, with the element's text when split in spans,
    scored. ``text``: the node's text, cleaned, at most ``_PRICE_CHARS`` long, with a digit."""
    if _SIX_LETTERS.search(text) and not _has_money(text):
        return None  # "Category 12", "Size 42 (EU)": words with a number and no money sign
    # The currency and the label may sit in the element around the number ("€ <span>17,10</span>",
    # "Brez DDV: <span>36.53€</span>"): read up to two levels of short element text.
    context = text
    currency = detect_currency(text, url)
    if currency is None and _FOUR_LETTERS.search(text):
        return None  # words with a number, no currency
    around: LexborNode | None = element
    for _ in range(2):
        if around is None or around.tag == "body":
            break
        whole = clean(around.text(separator=" ")) or ""
        if len(whole) > 60:
            break
        context = whole
        if len(whole) <= _PRICE_CHARS and whole != text:
            if currency is None and (found := detect_currency(whole, url)):
                # "3,56" + "<span>€</span>"; from the node's own number on ("<del>19,000원</del>
                # <strong>12,900</strong>원" is 12,900, not the struck price before it)
                text, currency = whole[max(0, whole.find(text)) :], found
            elif whole.startswith(text) and _is_cents(whole[len(text) :]):
                text = whole  # "$229" + "<sup>99</sup>"
        around = around.parent
    # Labels before the number count ("Brez DDV: 36.53€"); a "-5%" badge after it does not.
    label = context[: context.find(text)] if text in context else context
    if signals.not_a_price(label + " " + text):
        return None
    value = parse_price(text)
    if value is None or value <= 0:
        return None
    named = names.named(element, signals.PRICE_NAMED)
    if currency is None and not named:
        return None
    digits = sum(map(str.isdigit, text))
    if currency is None and digits < 2:
        return None
    struck = element.tag in {"del", "s", "strike"} or names.named(element, signals.STRUCK_NAMED, 2)
    score = (3.0 if currency else 0.0) + (2.0 if named else 0.0)
    # A bare number text ("49") reads less like a price than "€ 49.90".
    score += 0.5 if len(text) - digits <= 6 else 0.0
    # Net of tax ("bez DPH 3,56 €" beside "s DPH 4,27 €"): a price all the same; of the two,
    # the one the shop shows first and names as its price is its main price (B2B shops show
    # the net one first).
    net = signals.NET_OF_TAX.search(context) is not None
    return PriceSeen(value, currency, text, score, struck, position, net=net)


def _has_money(text: str) -> bool:
    """Whether ``text`` shows a currency symbol, code or unit word (CLDR's, any script)."""
    return detect_currency(text) is not None


def _is_cents(tail: str) -> bool:
    """Whether ``tail`` is the superscript cents after a whole amount (" 99")."""
    return tail[:1].isspace() and tail.strip().isdigit() and len(tail.strip()) == 2


def _sku_after(label_end: str, following: list[str], title: str | None) -> str | None:
    """The item number after a label: on the label's own text, else the next short text.
    ``title``: the product's name, in which an item number is a model number instead (None:
    no such check, for a part number)."""
    for text in [label_end, *following[:2]]:
        text = text.strip()
        if not text:
            continue
        match = signals.SKU_VALUE.match(text)
        value = match.group(0).rstrip(".") if match else ""
        rest = text[match.end() :].strip() if match else text
        if value and any(c.isdigit() for c in value) and len(rest) <= 2:
            return None if title is not None and value.lower() in title.lower() else value
        return None
    return None


def read(
    tree: LexborHTMLParser,
    url: str,
    references: list[str],
    full: bool = True,
    expect: Decimal | None = None,
) -> Evidence:
    """The visible evidence of ``tree``'s product (``references``: names the page gives it).

    ``full=False`` (structured data already names price, stock and item number) reads only the
    buy box next to the heading, for the cross-checks: price, sold-out notice and buy button.

    ``expect`` (with ``full=False``: the structured price) reads as prices first only the texts
    that may show it (the last digits of its whole amount in them). When one of them shows it,
    not struck through and not in an aside block, and none shows it struck, the price
    cross-check keeps the structured price whatever the other texts show
    (``crosscheck.visible_price``), so they are not read as prices (``prices_expected``).
    Otherwise they are, and the evidence is the same as without ``expect``.
    """
    found = Evidence()
    body = tree.body
    if body is None:
        return found
    heading = main_heading(tree, references)
    if full:
        nodes, start = _window(body, heading, _AFTER_HEADING, _BEFORE_HEADING)
    else:
        nodes, start = _window(body, heading, _CHECK_AFTER_HEADING, 0)
    names = _Names()
    title = clean(heading.text(separator=" ")) if heading is not None else None
    found.heading = title
    texts = [node.text(deep=False) for node in nodes]
    found.window = list(zip(nodes, texts, strict=True))
    # The expected price's last whole digits, which any text showing it holds ("1.299,90").
    digits = _digits_of(expect) if expect is not None and not full else None
    whole = str(int(abs(expect))) if digits is not None and expect is not None else ""
    skipped: list[tuple[int, str]] = []  # texts not read as prices (yet)
    # Cheap text tests first; whether the text sits in an aside block is asked only of texts
    # that could be evidence.
    for position, node in enumerate(nodes):
        short = texts[position].strip()
        if not short:
            continue
        parent = node.parent
        # Prices, stock notices and item-number labels are short.
        if parent is None or len(short) > 100:
            continue
        text = clean(short) or ""
        if len(short) <= _PRICE_CHARS and _DIGIT.search(short):
            if digits is None or _may_show(short, digits, whole):
                _read_price(found, nodes, texts, position, start, text, names, url)
            else:
                skipped.append((position, text))
        # Stock notices follow the heading (menus come before it); most texts state no stock.
        if position >= start and signals.may_state_stock(low := text.lower()):
            _read_stock(found, text, low, parent, names, position - start <= _CHECK_AFTER_HEADING)
        # Read in the buy box too when structured data is complete: the article number printed
        # for shoppers is the sku even where the data names another id (``crosscheck.sku``).
        labelled = len(text) <= 80 and signals.starts_with_id_label(text) and not found.labels_read
        if labelled:
            _read_label(found, text, texts[position + 1 : position + 3], title or "", parent, names)
    if digits is not None:
        found.prices_expected = _shown_unstruck(found.prices, expect)
        if not found.prices_expected:  # read them all, as without ``expect``
            for position, text in skipped:
                _read_price(found, nodes, texts, position, start, text, names, url)
            found.prices.sort(key=lambda p: p.position)
    _unstrike_lone_prices(found.prices)
    main = [p for p in found.prices if not p.struck]
    if main:
        found.price = max(main, key=lambda p: (p.score, -p.position))
    if full:
        found.form_id = _form_id(tree)
    if full or found.sold_out:
        found.buy_button = has_buy_button(tree, names)
    if full:
        found.quantity = has_quantity(tree, names)
    return found


def _read_price(
    found: Evidence,
    nodes: list[LexborNode],
    texts: list[str],
    position: int,
    start: int,
    text: str,
    names: _Names,
    url: str,
) -> None:
    """Note the price the text at ``position`` shows (``text``: cleaned), scored by where it
    sits from the heading (``start``), unless it shows none or sits in an aside block."""
    parent = nodes[position].parent
    if parent is None:
        return
    seen = _price_at(parent, text, names, position, url)
    if seen is None or names.aside(parent):
        return
    # Prices after the heading belong to it; closer ones more.
    distance = position - start
    # Before it (some layouts put the price above the name), the nearest ones more.
    seen.score += (
        2.0 * (1 - distance / _AFTER_HEADING)
        if distance >= 0
        else 0.3 + 0.4 * (1 + distance / _BEFORE_HEADING)
    )
    # A listing's tiles follow its heading; tiles above a product's name are other offers (a
    # list of ads beside it) and do not make the page a listing.
    seen.in_card = distance >= 0 and _after_link(nodes, texts, position)
    found.prices.append(seen)


def _digits_of(price: Decimal) -> str | None:
    """The last (up to three) digits of ``price``'s whole amount, which every text showing it
    holds in any format ("1.299,90", "1 299", "$229" + "<sup>99</sup>"); None for an amount too
    large or not finite to take them cheaply (``int()`` of a huge amount is quadratic)."""
    if not price.is_finite() or price.adjusted() >= 16:
        return None
    return str(int(abs(price)))[-3:]


def _may_show(short: str, digits: str, whole: str) -> bool:
    """Whether a text may show a price whose whole amount is ``whole`` (``digits``: its last
    digits): it holds them, or its first number starts the amount ("1" of "<b>1</b> 299 €",
    which is read with the element's text around it)."""
    if digits in short:
        return True
    first = _DIGIT_RUN.search(short)
    return first is not None and whole.startswith(first.group(0))


def _shown_unstruck(prices: list[PriceSeen], price: Decimal | None) -> bool:
    """Whether ``prices`` show ``price`` and never struck through (as read, before a lone struck
    price is taken for the current one: that only ever unstrikes)."""
    same = [p for p in prices if p.value == price]
    return bool(same) and not any(p.struck for p in same)


def _after_link(nodes: list[LexborNode], texts: list[str], position: int) -> bool:
    """Whether the text at ``position`` or one of the three texts before it is a link's text
    (a tile's name, or a tile that is one link)."""
    seen = 0
    for index in range(position, max(-1, position - 12), -1):
        if not texts[index].strip():
            continue
        current = nodes[index].parent
        for _ in range(3):
            if current is None:
                break
            if current.tag == "a" and current.attributes.get("href"):
                return True
            current = current.parent
        seen += 1
        if seen == 4:
            break
    return False


def _read_stock(
    found: Evidence, text: str, low: str, parent: LexborNode, names: _Names, buy_box: bool
) -> None:
    """Note a sold-out or in-stock statement in ``text`` (``low``: lower-cased): in a stock-named
    element, or a short one in the buy box (``buy_box``: within the first 150 texts after the
    heading)."""
    sold_out = signals.sold_out_phrase(text, low)
    if sold_out:
        if (
            signals.OTHER_CHANNEL.search(text)
            or signals.OTHER_SUBJECT.search(text)
            or signals.PRE_ORDER.search(text)
            or names.aside(parent)
            or names.variant(parent)
        ):
            return
        stock_named = names.named(parent, signals.STOCK_NAMED, 4)
        if stock_named or (buy_box and len(text) - len(sold_out) <= 15):
            found.sold_out = True
            found.sold_out_stated = found.sold_out_stated or stock_named
    elif (
        signals.in_stock(low)
        and names.named(parent, signals.STOCK_NAMED, 4)
        and not names.aside(parent)
    ):
        found.in_stock_text = True


def _unstrike_lone_prices(prices: list[PriceSeen]) -> None:
    """A price named "old" with no current price beside it is the price (names mislead); a net
    price beside it ("Brez DDV: 36.53€" under "40.00€") is not a current one."""
    for seen in prices:
        beside = (o for o in prices if not o.struck and not o.net and o.near(seen))
        if seen.struck and next(beside, None) is None:
            seen.struck = False


def _read_label(
    found: Evidence, text: str, following: list[str], title: str, parent: LexborNode, names: _Names
) -> None:
    """Note the article number, GTIN or part number that a label at the start of ``text``
    introduces (the first of each), unless ``parent`` is in an aside block (asked only of a
    label: most texts are none)."""
    if found.sku is None and (match := signals.SKU_LABEL.match(text)):
        found.sku = (
            None if names.aside(parent) else _sku_after(text[match.end() :], following, title)
        )
    elif found.global_id is None and (match := signals.GLOBAL_ID_LABEL.match(text)):
        value = None if names.aside(parent) else _sku_after(text[match.end() :], following, title)
        found.global_id = value if value and value.isdigit() else None
    elif found.mpn is None and (match := signals.MPN_LABEL.match(text)):
        found.mpn = (
            None if names.aside(parent) else _sku_after(text[match.end() :], following, None)
        )


def _form_id(tree: LexborHTMLParser) -> str | None:
    """The value of the first hidden ``sku`` / ``product_id`` field that looks like an id."""
    for node in tree.css("input[type=hidden][name]")[:200]:
        attrs = node.attributes
        value = (attrs.get("value") or "").strip()
        name = attrs.get("name") or ""
        if (
            signals.ID_FIELD.match(name)
            and signals.SKU_VALUE.fullmatch(value)
            and any(c.isdigit() for c in value)
        ):
            return value
    return None


# Forms a page adds its product to the cart with, by structure (any language): one that posts to
# a cart URL, or one that holds a quantity field; search, sign-in and newsletter forms are not.
_CART_ACTION = re.compile(
    r"cart|basket|bag|checkout|order|warenkorb|panier|carrito|carrello|koszyk|korzin|kosik"
    r"|winkelwagen|kurv|korg",
    re.IGNORECASE,
)
_QUANTITY_NAME = re.compile(
    r"qty|quantit|amount|count|cnt|menge|anzahl|cantidad|aantal|ilosc|kolvo|kolichestvo|mnozstvo"
    r"|pocet",
    re.IGNORECASE,
)
_NOT_CART_FORM = "input[type=search], input[type=email], input[type=password], input[name=q]"
_FORMS = 60  # forms looked at per page (a page with more is a listing or a generated page)


def has_quantity(tree: LexborHTMLParser, names: _Names | None = None) -> bool:
    """A quantity field for the product (``name="quantity"``, ``qty``, ``goodsCnt[]`` …, or a
    number input in a form), not in an aside block: a shopper can choose how many to buy."""
    names = names or _Names()
    for node in tree.css("input, select")[:400]:
        attrs = node.attributes
        kind = (attrs.get("type") or "").lower()
        if kind in {"hidden", "checkbox", "radio", "submit", "button", "search", "email"}:
            continue
        label = f"{attrs.get('name') or ''} {attrs.get('id') or ''}"
        quantity = _QUANTITY_NAME.search(label) or (kind == "number" and _in_form(node))
        if quantity and not names.aside(node):
            return True
    return False


def _in_form(node: LexborNode) -> bool:
    current = node.parent
    for _ in range(_ANCESTOR_LEVELS):
        if current is None or current.tag == "body":
            return False
        if current.tag == "form":
            return True
        current = current.parent
    return False


def _cart_form_button(tree: LexborHTMLParser, names: _Names) -> bool:
    """An enabled submit button of a form that adds to the cart (``_CART_ACTION``: a form
    posting to a cart URL, or one with a quantity field), whatever its label's language."""
    for form in tree.css("form")[:_FORMS]:
        attrs = form.attributes
        posts_to_cart = (attrs.get("method") or "").lower() == "post" and bool(
            _CART_ACTION.search(attrs.get("action") or "")
        )
        if form.css_first(_NOT_CART_FORM) is not None:
            continue
        if not posts_to_cart and not has_quantity_in(form):
            continue
        for button in form.css("button, input[type=submit], input[type=image]"):
            battrs = button.attributes
            if button.tag == "button" and (battrs.get("type") or "submit").lower() != "submit":
                continue
            marker = " ".join(v or "" for k, v in battrs.items() if k in {"class", "id", "name"})
            if "disabled" in battrs or signals.DISABLED_MARK.search(marker) or names.aside(button):
                continue
            return True
    return False


def has_quantity_in(form: LexborNode) -> bool:
    """Whether ``form`` holds a quantity field (``_QUANTITY_NAME``, or a number input)."""
    for node in form.css("input, select"):
        attrs = node.attributes
        kind = (attrs.get("type") or "").lower()
        if kind == "number" or (
            kind not in {"hidden", "checkbox", "radio"}
            and _QUANTITY_NAME.search(f"{attrs.get('name') or ''} {attrs.get('id') or ''}")
        ):
            return True
    return False


def has_buy_button(tree: LexborHTMLParser, names: _Names | None = None) -> bool:
    """An enabled add-to-cart / buy button for the page's product (not in an aside block): by
    structure (a cart form's submit button), else by its label or name."""
    names = names or _Names()
    if _cart_form_button(tree, names):
        return True
    selector = "button, input[type=submit], input[type=button], a[role=button], a[class*=btn]"
    for node in tree.css(selector):
        attrs = node.attributes
        label = attrs.get("value") if node.tag == "input" else node.text(separator=" ")
        label = clean(label or attrs.get("aria-label") or attrs.get("title")) or ""
        marker = " ".join(v or "" for k, v in attrs.items() if k in {"class", "id", "name"})
        if len(label) > 60 or not (
            signals.BUY_WORDS.search(label) or signals.BUY_MARK.search(marker)
        ):
            continue
        if "disabled" in attrs or signals.DISABLED_MARK.search(marker) or names.aside(node):
            continue
        return True
    return False


def breadcrumb(tree: LexborHTMLParser) -> str | None:
    """The breadcrumb trail ("Home > Lighting > Lamps") without the product itself."""
    node = tree.css_first(
        "[class*=breadcrumb], [id*=breadcrumb], [aria-label*=readcrumb], "
        '[itemtype$="BreadcrumbList"]'
    )
    if node is None:
        return None
    crumbs = [t for a in node.css("a") if (t := clean(a.text(separator=" "))) and len(t) < 80]
    return " > ".join(dict.fromkeys(crumbs)) or None


# A number of 6+ digits in the URL path; the page's data confirms it when it sits under an id-like
# key or attribute ("productId": 123456, data-adno="123456", postingID=123456, "post id: 123456").
_URL_NUMBER = re.compile(r"(?<!\d)\d{6,20}(?!\d)")
_ID_BEFORE = re.compile(r"(?:id|no|nr|sku|number|code)[\"']?\s{0,3}[:=]\s{0,3}[\"']?$", re.I)
_OCCURRENCES = 200


def url_item_id(html: str, url: str, canonical: str | None) -> str | None:
    """The item number of the product's URL, when the page names it as an id somewhere."""
    path = unquote(urlsplit(canonical or url).path)
    tokens: list[str] = _URL_NUMBER.findall(path)
    for token in reversed(tokens):
        at, seen = html.find(token), 0
        while at >= 0 and seen < _OCCURRENCES:
            if not html[at + len(token) : at + len(token) + 1].isdigit() and _ID_BEFORE.search(
                html[max(0, at - 24) : at]
            ):
                return token
            at, seen = html.find(token, at + 1), seen + 1
    return _url_code(html, path)


def _url_code(html: str, path: str) -> str | None:
    """A letters-and-digits code ending the URL's last segment ("…-boots-mu312m00l-c11.html")
    that the page names under an id key (``sku=MU312M00L-C11``, ``"id": "MU312M00L-C11"``), as
    the page spells it."""
    segment = path.rstrip("/").rsplit("/", 1)[-1]
    stem = segment.rsplit(".", 1)[0] if "." in segment else segment
    parts = stem[-80:].split("-")
    for count in (2, 1, 3):
        if count > len(parts) - 1:  # the segment has words before its code
            continue
        code = "-".join(parts[-count:])
        if not (5 <= len(code) <= 40 and _DIGIT.search(code) and _LETTERS.search(code)):
            continue
        for spelling in dict.fromkeys((code.upper(), code, code.lower())):
            at, seen = html.find(spelling), 0
            while at >= 0 and seen < _OCCURRENCES:
                after = html[at + len(spelling) : at + len(spelling) + 1]
                if not (after.isalnum() or after in "-_") and _ID_BEFORE.search(
                    html[max(0, at - 24) : at]
                ):
                    return spelling
                at, seen = html.find(spelling, at + 1), seen + 1
    return None


def url_tail_id(url: str) -> str | None:
    """The number ending the URL's last path segment ("…/anpix-adapter-114768289"), if any."""
    segment = unquote(urlsplit(url).path).rstrip("/").rsplit("/", 1)[-1]
    stem = segment.rsplit(".", 1)[0] if "." in segment else segment
    match = re.search(r"(?:^|[-_])(\d{6,20})$", stem[-40:])
    return match.group(1) if match else None
