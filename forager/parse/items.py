"""Items in the parse processes: a parser's result split into product and items, each item
checked against the contract (docs/PARSERS.md "Items") and put in canonical JSON once.

A parser that breaks the contract (a kind that is not a name, an empty key, data that is not
a JSON object) is a parser bug: the task fails ``internal`` with the item and the reason.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from forager.errors import ForagerError, NotProductPage
from forager.parse.base import Extracted, ItemRecord, ProductRecord

KIND = r"^[a-z][a-z0-9_-]{0,49}$"
_KIND = re.compile(KIND)
MAX_KEY = 500
MAX_ITEMS = 1000  # per page
MAX_DATA_BYTES = 64 * 1024  # per item, as canonical JSON


class BadItem(ForagerError):
    """An item that breaks the contract (the parser's bug; the task fails ``internal``)."""


@dataclass(frozen=True, slots=True)
class CheckedItem:
    """An item as stored: its data in canonical JSON and that JSON's SHA-256."""

    kind: str
    key: str
    data: dict[str, Any]
    content_hash: str


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"a {type(value).__name__} is not JSON (use text, numbers, lists, objects)")


def canonical(data: dict[str, Any]) -> str:
    """The one JSON text of ``data``: sorted keys, no spaces, decimals as strings."""
    return json.dumps(
        data,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=_plain,
        allow_nan=False,
    )


def check_item(item: Any, index: int) -> CheckedItem:
    """``item`` as stored, or ``BadItem`` naming it (``items[3]``) and what is wrong."""
    where = f"items[{index}]"
    if not isinstance(item, ItemRecord):
        raise BadItem(f"{where}: a {type(item).__name__}, not an ItemRecord")
    if not isinstance(item.kind, str) or not _KIND.match(item.kind):
        raise BadItem(f"{where}: kind {item.kind!r} must match {KIND}")
    if not isinstance(item.key, str) or not 0 < len(item.key.strip()) <= MAX_KEY:
        raise BadItem(f"{where} ({item.kind}): key must be a text of 1 to {MAX_KEY} characters")
    if not isinstance(item.data, dict) or not all(isinstance(k, str) for k in item.data):
        raise BadItem(f"{where} ({item.kind} {item.key!r}): data must be a JSON object")
    try:
        text = canonical(item.data)
    except (TypeError, ValueError) as exc:
        raise BadItem(f"{where} ({item.kind} {item.key!r}): {exc}") from None
    encoded = text.encode()
    if len(encoded) > MAX_DATA_BYTES or "\x00" in text:
        raise BadItem(
            f"{where} ({item.kind} {item.key!r}): data over {MAX_DATA_BYTES} bytes or with NUL"
        )
    return CheckedItem(item.kind, item.key.strip(), json.loads(text), _sha256(encoded))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def split(result: Any) -> tuple[ProductRecord | None, list[CheckedItem]]:
    """A parser's result as (product, checked items); a bare ``ProductRecord`` has no items.

    Two items of one kind and key on one page: the first is kept.
    """
    if isinstance(result, ProductRecord):
        return result, []
    if not isinstance(result, Extracted):
        raise BadItem(
            f"the parser returned a {type(result).__name__}, not a ProductRecord or Extracted"
        )
    if result.product is not None and not isinstance(result.product, ProductRecord):
        raise BadItem(f"Extracted.product is a {type(result.product).__name__}")
    if len(result.items) > MAX_ITEMS:
        raise BadItem(f"{len(result.items)} items on one page (at most {MAX_ITEMS})")
    items: dict[tuple[str, str], CheckedItem] = {}
    for index, item in enumerate(result.items):
        checked = check_item(item, index)
        items.setdefault((checked.kind, checked.key), checked)
    return result.product, list(items.values())


def result_json(result: Any) -> dict[str, Any]:
    """A parser's result as JSON: the product record itself, or with items
    ``{"product": record | null, "items": [{"kind", "key", "data"}, …]}``."""
    product, items = split(result)
    if not items and isinstance(result, ProductRecord):
        return result.to_json()
    return {
        "product": product.to_json() if product is not None else None,
        "items": [{"kind": i.kind, "key": i.key, "data": i.data} for i in items],
    }


def product_of(result: Any, url: str) -> ProductRecord:
    """The product of a parser's result; ``NotProductPage`` when it gave only items."""
    product, _ = split(result)
    if product is None:
        raise NotProductPage(f"{url}: the parser gave items, no product")
    return product
