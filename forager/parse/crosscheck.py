"""Structured data checked against the visible page, and the visible page where data is missing.

Shops' structured data goes stale or names the list price while the page shows the sale price;
and many pages have none. Each function here takes what structured data says and the page's
visible evidence (``forager.parse.visible``) and returns the value to keep, with its source.
"""

from __future__ import annotations

from typing import Any

from forager.parse import visible
from forager.parse.identifiers import gtin
from forager.parse.structured import OfferFacts

# A visible price this sure (currency + price-named element + right after the heading) is trusted
# over structured data that the page does not show anywhere near its heading.
_SURE_PRICE = 6.5


def visible_price(offers: OfferFacts, seen: visible.Evidence) -> bool:
    """Fill or correct ``offers.price`` from the page; True when the visible price was taken."""
    shown = seen.price
    if shown is None or offers.price == shown.value:
        return False
    if offers.price is not None and offers.price <= 0:
        return False  # kept as extracted: validation names it, nothing "fixes" it
    former = [p.value for p in seen.prices if p.struck and p.near(shown) and p.value > shown.value]
    if offers.price is None:
        offers.price = shown.value
        offers.currency = offers.currency or shown.currency
        offers.list_price = offers.list_price or (former[0] if former else None)
        return True
    struck = {p.value for p in seen.prices if p.struck and p.near(shown)}
    if offers.price in struck and shown.value < offers.price:
        # Structured data names the former price the page shows struck through beside the price.
        offers.list_price = offers.list_price or offers.price
        offers.price = shown.value
        return True
    if offers.price in {p.value for p in seen.prices if not p.struck}:
        return False  # the structured price is on the page too: keep it
    if shown.score >= _SURE_PRICE and (shown.currency in {None, offers.currency}):
        offers.price = shown.value
        return True
    return False


def availability(
    structured: bool | None, seen: visible.Evidence, price: object
) -> tuple[bool | None, str | None]:
    """(in stock?, source) from structured data, the visible page, and whether it has a price.

    - A sold-out notice inside an element named as the stock / availability wins over
      structured data that says in stock, unless the page also offers a working add-to-cart
      button (structured data and the button agree against one text).
    - A bare sold-out text next to the heading decides only when structured data says nothing
      and the page neither offers an add-to-cart button nor says "in stock" in its stock element.
    - Structured "out of stock" gives way to a working add-to-cart button when no sold-out text
      is shown (the data is stale).
    - Without any statement, a product offered at a price is in stock (the benchmark's and
      shoppers' reading); None only without a price.
    """
    weak = seen.sold_out and not (seen.buy_button or seen.in_stock_text) and structured is None
    stated = seen.sold_out_stated and not (structured and seen.buy_button)
    if stated or weak:
        return False, "visible"
    if structured is False and seen.buy_button and not seen.sold_out:
        return True, "visible"  # stale data: the page offers the product with a working button
    if structured is not None:
        return structured, None
    if seen.in_stock is not None:
        return seen.in_stock, "visible"
    if price is not None:
        return True, "derived"
    return None, None


def _structured_id(data: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = data.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, int | str) and (text := str(value).strip()):
            return text.removeprefix("sku:")
    return None


def sku(
    data: dict[str, Any],
    seen: visible.Evidence,
    html: str,
    url: str,
    canonical: str | None,
    kind: str,
) -> tuple[str | None, str]:
    """(item number, source): structured sku, a labelled number, the cart form's id field, the
    URL's id, an EAN, then MPN / GTIN from structured data."""
    found = _structured_id(data, ("sku", "productID"))
    if found is not None:
        # The page prints another article number for shoppers, and the structured one is a
        # GTIN or shown nowhere near the product: the printed one is what a shopper quotes.
        if seen.sku is not None and seen.sku != found and (gtin(found) or not _shown(found, seen)):
            return seen.sku, "visible"
        return found, kind
    if seen.sku is not None:
        return seen.sku, "visible"
    if seen.form_id is not None:
        return seen.form_id, "visible"
    found = visible.url_item_id(html, url, canonical)
    if found is not None:
        return found, "script"
    found = visible.url_tail_id(canonical or url)
    if found is not None:
        return found, "url"
    if seen.global_id is not None:
        return seen.global_id, "visible"
    return _structured_id(data, ("mpn", "gtin13", "gtin", "gtin14", "gtin12", "gtin8")), kind


def _shown(value: str, seen: visible.Evidence) -> bool:
    """Whether ``value`` is printed in the texts read around the heading."""
    return any(value in text for _, text in seen.window)


_GTIN_KEYS = ("gtin13", "gtin", "gtin14", "gtin12", "gtin8", "ean", "upc", "isbn")


def global_id(
    data: dict[str, Any], seen: visible.Evidence, sku: str | None, kind: str
) -> tuple[str | None, str]:
    """(GTIN, source): structured gtin13 / gtin / … (``kind``: where the data came from), a
    labelled EAN / GTIN / UPC, or the sku itself when it is one — each only when its check
    digit fits."""
    for key in _GTIN_KEYS:
        if (found := gtin(_structured_id(data, (key,)))) is not None:
            return found, kind
    if (found := gtin(seen.global_id)) is not None:
        return found, "visible"
    # The structured sku or the sku kept, when it is a GTIN (the printed article number may have
    # taken the structured one's place in the sku field).
    return gtin(_structured_id(data, ("sku", "productID"))) or gtin(sku), "derived"


def part_number(data: dict[str, Any], seen: visible.Evidence, kind: str) -> tuple[str | None, str]:
    """(manufacturer part number, source): structured ``mpn``, else a labelled one."""
    found = _structured_id(data, ("mpn",))
    if found is not None:
        return found, kind
    return seen.mpn, "visible"
