"""Saving extracted products: upsert by ``url_hash``, price history only when something moved."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Literal

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.models import PriceHistory, Product, ProductImage
from forager.db.types import utcnow
from forager.parse.base import ProductRecord
from forager.products.records import RECORD_FIELDS

# Fields a product page can change; parser name/version are provenance, not content.
_CONTENT_FIELDS = (*(f for f in RECORD_FIELDS if f != "url"), "image_urls")
_PRICE_FIELDS = ("price", "original_price", "currency", "availability", "is_available")
# What a new parser version may change without the page's content changing.
_PROVENANCE_FIELDS = ("parser_name", "parser_version", "field_confidence", "quality_issues")

# reparsed: same content, new parser provenance (only those columns are written).
_MONEY_MAX = Decimal(10) ** 12  # NUMERIC(14, 2)

SaveResult = Literal["created", "updated", "reparsed", "unchanged"]


def content_hash(record: ProductRecord) -> str:
    """SHA-256 of the extracted fields in canonical JSON (decimals as strings)."""
    data = record.to_json()
    canonical = json.dumps({k: data[k] for k in _CONTENT_FIELDS}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _money(value: Decimal | None) -> Decimal | None:
    """A value the Money columns can hold; one they cannot (its issue is already listed in
    ``quality_issues`` by validation) is stored as NULL rather than failing the save."""
    if value is None or (value.is_finite() and abs(value) < _MONEY_MAX):
        return value
    return None


def _columns(record: ProductRecord) -> dict[str, object]:
    return {
        "product_name": record.product_name[:512],
        "description": record.description,
        "price": _money(record.price),
        "currency": record.currency,
        "original_price": _money(record.original_price),
        "rating": _money(record.rating),
        "review_count": record.review_count,
        "availability": record.availability[:255] if record.availability else None,
        "is_available": record.is_available,
        "brand": record.brand[:255] if record.brand else None,
        "category": record.category[:512] if record.category else None,
        "sku": record.sku[:100] if record.sku else None,
        "asin": record.asin[:20] if record.asin else None,
        "parser_name": record.parser_name,
        "parser_version": record.parser_version,
        "field_confidence": record.field_confidence,
        "quality_issues": record.quality_issues,
    }


async def save_product(
    session: AsyncSession,
    *,
    domain_id: int,
    task_id: int,
    url: str,
    url_hash: str,
    record: ProductRecord,
) -> tuple[int, SaveResult]:
    """Insert or update the product of ``url_hash``; unchanged content writes nothing.

    Content is the extracted fields (``content_hash``). When only the parser's provenance moved
    (a new parser version read the same values), just those columns are updated.
    """
    digest = content_hash(record)
    now = utcnow()
    product = (
        await session.execute(select(Product).where(Product.url_hash == url_hash).with_for_update())
    ).scalar_one_or_none()
    columns = _columns(record)
    if product is not None and product.content_hash == digest:
        moved = {k: columns[k] for k in _PROVENANCE_FIELDS if getattr(product, k) != columns[k]}
        if not moved:
            return product.id, "unchanged"
        for key, value in moved.items():
            setattr(product, key, value)
        return product.id, "reparsed"
    if product is None:
        product = Product(
            domain_id=domain_id,
            crawl_task_id=task_id,
            url=url,
            url_hash=url_hash,
            content_hash=digest,
            last_crawled_at=now,
            **columns,
        )
        session.add(product)
        await session.flush()
        result: SaveResult = "created"
        price_moved = True
        images_moved = bool(record.image_urls)
    else:
        price_moved = any(getattr(product, f) != columns[f] for f in _PRICE_FIELDS)
        old_images = (
            await session.execute(
                select(ProductImage.image_url)
                .where(ProductImage.product_id == product.id)
                .order_by(ProductImage.position)
            )
        ).scalars()
        images_moved = list(old_images) != record.image_urls
        for key, value in columns.items():
            setattr(product, key, value)
        product.content_hash = digest
        product.crawl_task_id = task_id
        product.last_crawled_at = now
        product.updated_at = now
        result = "updated"
    if images_moved:
        if result == "updated":
            await session.execute(delete(ProductImage).where(ProductImage.product_id == product.id))
        if record.image_urls:
            await session.execute(
                insert(ProductImage),
                [
                    {
                        "product_id": product.id,
                        "image_url": image,
                        "image_type": "primary" if position == 0 else "gallery",
                        "position": position,
                        "created_at": now,
                    }
                    for position, image in enumerate(record.image_urls)
                ],
            )
    if price_moved:
        await session.execute(
            insert(PriceHistory).values(
                product_id=product.id,
                crawl_task_id=task_id,
                price=columns["price"],
                original_price=columns["original_price"],
                currency=record.currency,
                availability=columns["availability"],
                is_available=record.is_available,
                recorded_at=now,
            )
        )
    return product.id, result
