"""Stored products as DESIGN.md "Product record" dicts (JSON API, JSONL export, CLI output)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.models import Product, ProductImage
from forager.parse.base import EXTRACTED_FIELDS

# The product's own columns; image URLs live in their own table.
RECORD_FIELDS = ("url", *(name for name in EXTRACTED_FIELDS if name != "image_urls"))


def product_record(product: Product | Row[Any], image_urls: list[str]) -> dict[str, Any]:
    """The product record of a stored product (or a row of its columns); decimals as strings,
    missing as ``None``."""
    record: dict[str, Any] = {name: getattr(product, name) for name in RECORD_FIELDS}
    for key in ("price", "original_price", "rating"):
        if record[key] is not None:
            record[key] = str(record[key])
    record["image_urls"] = image_urls
    record["parser_name"] = product.parser_name
    record["parser_version"] = product.parser_version
    record["field_confidence"] = product.field_confidence
    record["quality_issues"] = product.quality_issues
    return record


async def grouped(
    session: AsyncSession, key: Any, value: Any, keys: Iterable[Any], *order: Any
) -> defaultdict[Any, list[Any]]:
    """``{key: [value, …]}`` of the rows whose ``key`` is one of ``keys``, each list in
    ``order`` (one query for all of them; an empty list for a key without rows)."""
    found: defaultdict[Any, list[Any]] = defaultdict(list)
    wanted = list(set(keys))
    if wanted:
        rows = await session.execute(
            select(key, value).where(key.in_(wanted)).order_by(key, *order)
        )
        for k, v in rows:
            found[k].append(v)
    return found


async def image_urls(session: AsyncSession, product_ids: Sequence[int]) -> dict[int, list[str]]:
    """Each product's image URLs, main image first (one query for all of them)."""
    return await grouped(
        session, ProductImage.product_id, ProductImage.image_url, product_ids, ProductImage.position
    )
