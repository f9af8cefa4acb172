"""What a feed exports: the rows of its kind with a change number in a run's range, as records,
a bounded chunk at a time in change-number order (each chunk one short read)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, select

from forager.db.engine import Database
from forager.db.models import CrawlTask, Domain, Feed, Item, PriceHistory, Product
from forager.feeds.cursor import FOLLOWED
from forager.items.records import ITEM_FIELDS, item_record
from forager.products import tags
from forager.products.records import RECORD_FIELDS, image_urls, product_record

PRODUCT_FIELDS = ("id", *RECORD_FIELDS, "image_urls", "parser_name", "parser_version", "updated_at")
PRICE_FIELDS = (
    "id",
    "product_id",
    "url",
    "price",
    "original_price",
    "currency",
    "availability",
    "is_available",
    "recorded_at",
)
# Each kind's fields, in order: CSV columns and Parquet's schema.
FIELDS: dict[str, tuple[str, ...]] = {
    "products": PRODUCT_FIELDS,
    "items": ITEM_FIELDS,
    "price_changes": PRICE_FIELDS,
}


@dataclass(frozen=True, slots=True)
class Chunk:
    """Records of one read and the highest change number among them."""

    records: list[dict[str, Any]]
    last_seq: int


def _narrowed(query: Select[Any], feed: Feed, model: Any) -> Select[Any]:
    if feed.domain is not None:
        domain_id = select(Domain.id).where(Domain.domain_name == feed.domain).scalar_subquery()
        query = query.where(model.domain_id == domain_id)
    if feed.batch_name is not None:
        in_batch = select(CrawlTask.id).where(CrawlTask.batch_name == feed.batch_name)
        query = query.where(model.crawl_task_id.in_(in_batch))
    return query


def _query(feed: Feed, after: int, upto: int, size: int) -> Select[Any]:
    column = FOLLOWED[feed.kind].column
    if feed.kind == "products":
        query = _narrowed(select(Product, column), feed, Product)
        if feed.tag is not None:
            query = query.where(tags.having(feed.tag))
    elif feed.kind == "items":
        query = _narrowed(select(Item, column), feed, Item)
        if feed.item_kind is not None:
            query = query.where(Item.kind == feed.item_kind)
    else:
        query = _narrowed(
            select(PriceHistory, Product.url, column).join(
                Product, Product.id == PriceHistory.product_id
            ),
            feed,
            Product,
        )
        if feed.tag is not None:
            query = query.where(tags.having(feed.tag))
    return query.where(column > after, column <= upto).order_by(column).limit(size)


def _price_record(row: PriceHistory, url: str) -> dict[str, Any]:
    record = {name: getattr(row, name, None) for name in PRICE_FIELDS}
    record["url"] = url
    for key in ("price", "original_price"):
        if record[key] is not None:
            record[key] = str(record[key])
    record["recorded_at"] = row.recorded_at.isoformat()
    return record


async def chunks(
    db: Database, feed: Feed, after: int, upto: int, size: int
) -> AsyncIterator[Chunk]:
    """The feed's records with a change number in ``(after, upto]``, ``size`` per chunk."""
    while after < upto:
        async with db.reader() as session:
            rows = (await session.execute(_query(feed, after, upto, size))).all()
            if not rows:
                return
            if feed.kind == "products":
                images = await image_urls(session, [row[0].id for row in rows])
        if feed.kind == "products":
            records = [
                {
                    "id": p.id,
                    **product_record(p, images[p.id]),
                    "updated_at": p.updated_at.isoformat(),
                }
                for p, _ in rows
            ]
        elif feed.kind == "items":
            records = [item_record(item) for item, _ in rows]
        else:
            records = [_price_record(history, url) for history, url, _ in rows]
        after = int(rows[-1][-1])
        yield Chunk(records, after)
        if len(rows) < size:
            return
