"""Stored products as DESIGN.md "Product record" dicts (JSON API, JSONL export, CLI output)."""

from __future__ import annotations

from typing import Any

from forager.db.models import Product

RECORD_FIELDS = (
    "url",
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
    "asin",
)


def product_record(product: Product, image_urls: list[str]) -> dict[str, Any]:
    """The product record of a stored product; decimals as strings, missing as ``None``."""
    record: dict[str, Any] = {name: getattr(product, name) for name in RECORD_FIELDS}
    for key in ("price", "original_price", "rating"):
        if record[key] is not None:
            record[key] = str(record[key])
    record["image_urls"] = image_urls
    record["parser_name"] = product.parser_name
    record["parser_version"] = product.parser_version
    return record
