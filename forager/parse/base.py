"""The parser contract: HTML in, a ``ProductRecord`` and/or ``ItemRecord``s out (or a
``ParseError`` saying why not)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any, Protocol

# The fields a parser extracts from a page, in record order (the rest is provenance).
EXTRACTED_FIELDS = (
    "product_name",
    "description",
    "price",
    "currency",
    "original_price",
    "rating",
    "review_count",
    "availability",
    "is_available",
    "brand",
    "category",
    "sku",
    "gtin",
    "mpn",
    "asin",
    "image_urls",
)


@dataclass(slots=True)
class ProductRecord:
    """One product as DESIGN.md "Product record" defines it; missing values are ``None``."""

    url: str
    product_name: str
    description: str | None = None
    price: Decimal | None = None
    currency: str | None = None
    original_price: Decimal | None = None
    rating: Decimal | None = None
    review_count: int | None = None
    availability: str | None = None
    is_available: bool | None = None
    brand: str | None = None
    category: str | None = None
    # The shop's own article number as shown to shoppers; a GTIN (EAN / UPC / JAN, check digit
    # valid) and the manufacturer's part number have fields of their own.
    sku: str | None = None
    gtin: str | None = None
    mpn: str | None = None
    asin: str | None = None
    image_urls: list[str] = field(default_factory=list)
    parser_name: str = ""
    parser_version: str = ""
    # How sure the parser is of each field it filled (0..1, by where the value came from),
    # and the validation rules the record breaks (forager.parse.quality); never "fixed".
    field_confidence: dict[str, float] = field(default_factory=dict)
    quality_issues: list[str] = field(default_factory=list)

    def __reduce__(self) -> tuple[type[ProductRecord], tuple[Any, ...]]:
        """Pickled (from a parse process) as its values in field order: rebuilt by one call,
        where a slotted dataclass's own pickling sets one slot at a time (~30 % less time to
        load a record)."""
        return ProductRecord, tuple([getattr(self, name) for name in _RECORD_NAMES])

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: decimals as strings, never floats."""
        # What ``asdict`` gives, without its recursive deep copy (every field is a scalar, or a
        # list / dict of scalars: one level of copy is a whole one).
        data = {name: _copied(getattr(self, name)) for name in _RECORD_NAMES}
        for key in ("price", "original_price", "rating"):
            if data[key] is not None:
                data[key] = str(data[key])
        return data


_RECORD_NAMES = tuple(f.name for f in fields(ProductRecord))


def _copied(value: Any) -> Any:
    if isinstance(value, list):
        return list(value)
    return dict(value) if isinstance(value, dict) else value


@dataclass(slots=True)
class ItemRecord:
    """One record that is not a product (an ad, a listing, a snapshot): stored as versioned JSON.

    ``key`` identifies it among the domain's items of its ``kind``, so a recrawl (of this page
    or of another page showing it) updates the same item; ``data`` is JSON (``Decimal`` values
    are written as strings).
    """

    kind: str
    key: str
    data: dict[str, Any]


@dataclass(slots=True)
class Extracted:
    """What a page gives when it is not just one product: the product (or None), items, and
    links (URLs, absolute or relative to the page) a crawl job takes through its scope, rules
    and budgets as it takes the page's own links (docs/DISCOVERY.md)."""

    product: ProductRecord | None = None
    items: list[ItemRecord] = field(default_factory=list)
    links: list[str] = field(default_factory=list)


class Parser(Protocol):
    """A named, versioned extractor. Pure and synchronous: no I/O, safe to run in a thread.

    The contract of built-in parsers and plugins alike (docs/PARSERS.md). An optional
    ``hosts: tuple[str, ...]`` names the host patterns the parser claims by default for new
    domains: ``shop.example`` (the host and its subdomains), ``*`` standing for one label
    (``amazon.*``). An optional ``gives_links = True`` says it returns links (``Extracted.links``)
    on a crawl job's listings too, so it is run there (docs/DISCOVERY.md).
    """

    name: str
    version: str

    def parse(self, html: str, url: str) -> ProductRecord | Extracted:
        """Extract the product (or an ``Extracted``: a product and/or items), or raise
        ``CaptchaPage`` / ``BlockedPage`` / ``NotProductPage``."""
        ...
