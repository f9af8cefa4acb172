"""Saving extracted products: upsert by ``url_hash``, price history only when something moved.

``save_products`` saves a whole batch in a few set-based statements (the worker's writer):
one locked read of the existing rows and their images, then multi-row inserts and updates.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, NamedTuple, cast

from sqlalchemy import Table, bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.alerts import detect
from forager.alerts.rules import Observation
from forager.db.many import Many
from forager.db.models import PriceHistory, Product, ProductImage
from forager.db.types import utcnow
from forager.parse.base import ProductRecord
from forager.products.records import RECORD_FIELDS
from forager.queue import adaptive

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
        "gtin": record.gtin[:14] if record.gtin else None,
        "mpn": record.mpn[:100] if record.mpn else None,
        "asin": record.asin[:20] if record.asin else None,
        "parser_name": record.parser_name,
        "parser_version": record.parser_version,
        "field_confidence": record.field_confidence,
        "quality_issues": record.quality_issues,
    }


@dataclass(frozen=True, slots=True)
class ProductInput:
    """One extracted record to save, and where it came from; ``watch``: say what this crawl
    changed (``Saved.signal``, for an adaptive recrawl)."""

    domain_id: int
    task_id: int | None
    url: str
    url_hash: str
    record: ProductRecord
    watch: bool = False


class Saved(NamedTuple):
    """One saved item: its product, what the save did, and for a watched item what the crawl
    changed (``forager.queue.adaptive`` signals: ``changed:price`` …, unchanged, partial,
    first)."""

    product_id: int
    result: SaveResult
    signal: str | None = None


def _columns_names() -> tuple[str, ...]:
    return tuple(_columns(ProductRecord(url="", product_name="")))


_PRODUCTS = cast(Table, Product.__table__)
# Rows written as Core tables, not through the ORM's bulk path (no mapper per row).
_HISTORY = cast(Table, PriceHistory.__table__)
_IMAGES = cast(Table, ProductImage.__table__)
_INSERT_HISTORY = Many(insert(_HISTORY))
_INSERT_IMAGES = Many(insert(_IMAGES))
_KEPT = ("id", "url_hash", "content_hash", *_PRICE_FIELDS, *_PROVENANCE_FIELDS)
_UPDATE_CONTENT = (
    update(_PRODUCTS)
    .where(_PRODUCTS.c.id == bindparam("b_id"))
    .values(
        {
            **{name: bindparam(f"b_{name}") for name in ("domain_id", "content_hash")},
            **{name: bindparam(f"b_{name}") for name in _columns_names()},
            "crawl_task_id": bindparam("b_crawl_task_id"),
            "last_crawled_at": bindparam("b_now"),
            "updated_at": bindparam("b_now"),
        }
    )
)
# Unchanged content: only the crawl time moves (updated_at says when the content changed).
_TOUCH = (
    update(_PRODUCTS)
    .where(_PRODUCTS.c.id == bindparam("b_id"))
    .values(last_crawled_at=bindparam("b_now"), updated_at=_PRODUCTS.c.updated_at)
)


async def save_product(
    session: AsyncSession,
    *,
    domain_id: int,
    task_id: int | None,
    url: str,
    url_hash: str,
    record: ProductRecord,
) -> tuple[int, SaveResult]:
    """Insert or update the product of ``url_hash``; unchanged content writes nothing but
    ``last_crawled_at``. (One record; see ``save_products``.)"""
    [saved] = await save_products(
        session, [ProductInput(domain_id, task_id, url, url_hash, record)]
    )
    return saved.product_id, saved.result


async def save_products(session: AsyncSession, items: Sequence[ProductInput]) -> list[Saved]:
    """Upsert every item (distinct ``url_hash``es); one ``Saved`` per item, in item order.

    Content is the extracted fields (``content_hash``). When only the parser's provenance moved
    (a new parser version read the same values), just those columns are updated; unchanged
    content moves ``last_crawled_at`` only.
    """
    if not items:
        return []
    now = utcnow()
    existing = {
        row.url_hash: row
        for row in await session.execute(
            select(*(_PRODUCTS.c[name] for name in _KEPT))
            .where(_PRODUCTS.c.url_hash.in_([i.url_hash for i in items]))
            .with_for_update()
        )
    }
    old_images = await _images_of(session, [row.id for row in existing.values()])
    results: list[tuple[int, SaveResult] | None] = [None] * len(items)
    new: list[int] = []
    content: list[dict[str, Any]] = []
    touched: list[dict[str, Any]] = []
    images: dict[int, list[str]] = {}  # product id -> new image list (replacing the old)
    history: list[tuple[int, int]] = []  # (item index, product id)
    digests: dict[int, str] = {}  # item index -> content hash, of the new products
    for index, item in enumerate(items):
        digest = content_hash(item.record)
        columns = _columns(item.record)
        row = existing.get(item.url_hash)
        if row is None:
            new.append(index)
            digests[index] = digest
            continue
        if row.content_hash == digest:
            moved = {k: columns[k] for k in _PROVENANCE_FIELDS if getattr(row, k) != columns[k]}
            if moved:
                await session.execute(
                    update(_PRODUCTS)
                    .where(_PRODUCTS.c.id == row.id)
                    .values(**moved, last_crawled_at=now, updated_at=now)
                )
            else:
                touched.append({"b_id": row.id, "b_now": now})
            results[index] = (row.id, "reparsed" if moved else "unchanged")
            continue
        content.append(
            {
                "b_id": row.id,
                "b_domain_id": item.domain_id,
                "b_content_hash": digest,
                "b_crawl_task_id": item.task_id,
                "b_now": now,
                **{f"b_{k}": v for k, v in columns.items()},
            }
        )
        if any(getattr(row, f) != columns[f] for f in _PRICE_FIELDS):
            history.append((index, row.id))
        if old_images.urls.get(row.id, []) != item.record.image_urls:
            images[row.id] = item.record.image_urls
        results[index] = (row.id, "updated")
    if new:
        # Ids matched by url_hash (unique), not by row order: asking RETURNING for the order of
        # the parameters makes SQLite insert one row per statement.
        inserted = await session.execute(
            insert(_PRODUCTS).returning(_PRODUCTS.c.url_hash, _PRODUCTS.c.id),
            [_new_row(items[i], digests[i], now) for i in new],
        )
        ids: dict[str, int] = dict(inserted.all())
        for index in new:
            product_id = ids[items[index].url_hash]
            results[index] = (product_id, "created")
            history.append((index, product_id))
            if items[index].record.image_urls:
                images[product_id] = items[index].record.image_urls
    if content:
        await session.execute(_UPDATE_CONTENT, content)
    if touched:
        await session.execute(_TOUCH, touched)
    await _replace_images(session, images, old_images, now)
    observed = {
        i: _observation(items[i], product_id, existing.get(items[i].url_hash))
        for i, product_id in history
    }
    watched = [i for i, item in enumerate(items) if item.watch and item.url_hash in existing]
    for i in watched:
        if i not in observed:
            saved = results[i]
            assert saved is not None
            observed[i] = _observation(items[i], saved[0], existing[items[i].url_hash])
    filled = False
    if any(_gap(observed[i]) for i in watched):
        # The last good values, read once for the alerts and the watched items alike.
        filled_in = await detect.last_good(session, list(observed.values()))
        observed = dict(zip(list(observed), filled_in, strict=True))
        filled = True
    if history:
        # Alerts first: they read the history before this change (the last good values).
        await detect.products(session, [observed[i] for i, _ in history], filled=filled)
        await _INSERT_HISTORY.execute(
            session, [_history_row(items[i], product_id, now) for i, product_id in history]
        )
    signals = {i: _signal(observed[i]) for i in watched}
    for i, item in enumerate(items):
        if item.watch and i not in signals:
            signals[i] = adaptive.FIRST
    return [Saved(r[0], r[1], signals.get(i)) for i, r in enumerate(results) if r is not None]


def _gap(o: Observation) -> bool:
    return o.old_price is None or o.old_available is None


def _signal(o: Observation) -> str:
    """What a watched crawl changed, from the same observation the alerts judge (its old values
    the last good ones): a value read now that differs from the last good one is a change; a
    value known before and missing now makes the record partial."""
    moved = [
        name
        for name, new, old in (
            ("price", o.price, o.old_price),
            ("availability", o.available, o.old_available),
        )
        if new is not None and old is not None and new != old
    ]
    if moved:
        return adaptive.changed(" and ".join(moved))
    if (o.price is None and o.old_price is not None) or (
        o.available is None and o.old_available is not None
    ):
        return adaptive.PARTIAL
    return adaptive.UNCHANGED


def _new_row(item: ProductInput, digest: str, now: datetime) -> dict[str, Any]:
    return {
        "domain_id": item.domain_id,
        "crawl_task_id": item.task_id,
        "url": item.url,
        "url_hash": item.url_hash,
        "content_hash": digest,
        "last_crawled_at": now,
        "created_at": now,
        "updated_at": now,
        **_columns(item.record),
    }


def _observation(item: ProductInput, product_id: int, old: Any) -> Observation:
    return Observation(
        product_id=product_id,
        domain_id=item.domain_id,
        task_id=item.task_id,
        url=item.url,
        name=item.record.product_name,
        currency=item.record.currency,
        price=_money(item.record.price),
        available=item.record.is_available,
        old_price=None if old is None else old.price,
        old_available=None if old is None else old.is_available,
    )


def _history_row(item: ProductInput, product_id: int, now: datetime) -> dict[str, Any]:
    columns = _columns(item.record)
    return {
        "product_id": product_id,
        "crawl_task_id": item.task_id,
        "price": columns["price"],
        "original_price": columns["original_price"],
        "currency": item.record.currency,
        "availability": columns["availability"],
        "is_available": item.record.is_available,
        "recorded_at": now,
    }


# What a product's image row knows beyond its URL (its stored copy, the download state): kept
# when the product's image list changes and the URL stays in it.
_CARRIED = (
    "image_path",
    "alt_text",
    "width",
    "height",
    "file_size",
    "content_hash",
    "content_type",
    "fetched_at",
    "fetch_after",
    "fetch_attempts",
    "error",
)
_FRESH: dict[str, Any] = dict.fromkeys(_CARRIED) | {"fetch_attempts": 0}


@dataclass(slots=True)
class _OldImages:
    urls: dict[int, list[str]]  # product id -> image URLs, main image first
    carried: dict[tuple[int, str], dict[str, Any]]  # (product id, URL) -> _CARRIED values


async def _images_of(session: AsyncSession, product_ids: list[int]) -> _OldImages:
    found = _OldImages({}, {})
    if not product_ids:
        return found
    rows = await session.execute(
        select(
            ProductImage.product_id,
            ProductImage.image_url,
            *(getattr(ProductImage, name) for name in _CARRIED),
        )
        .where(ProductImage.product_id.in_(product_ids))
        .order_by(ProductImage.product_id, ProductImage.position)
    )
    for product_id, url, *carried in rows:
        found.urls.setdefault(product_id, []).append(url)
        found.carried.setdefault((product_id, url), dict(zip(_CARRIED, carried, strict=True)))
    return found


async def _replace_images(
    session: AsyncSession, images: dict[int, list[str]], old: _OldImages, now: datetime
) -> None:
    stale = [product_id for product_id in images if product_id in old.urls]
    if stale:
        await session.execute(delete(ProductImage).where(ProductImage.product_id.in_(stale)))
    rows = [
        {
            "product_id": product_id,
            "image_url": image,
            "image_type": "primary" if position == 0 else "gallery",
            "position": position,
            "created_at": now,
            **old.carried.get((product_id, image), _FRESH),
        }
        for product_id, urls in images.items()
        for position, image in enumerate(urls)
    ]
    if rows:
        await _INSERT_IMAGES.execute(session, rows)
