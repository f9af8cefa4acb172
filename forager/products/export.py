"""Streaming exports of products as CSV or JSON Lines, a bounded chunk of rows at a time.

Each chunk is one short read transaction (keyset by id), so an export of any size holds
neither all rows in memory nor one long snapshot open; rows come out in id order.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.engine import Database
from forager.db.models import ProductImage
from forager.products.records import RECORD_FIELDS, product_record
from forager.products.search import ProductFilters, chunk_query

CHUNK_ROWS = 500
CSV_FIELDS = (*RECORD_FIELDS, "image_urls", "parser_name", "parser_version")

Format = Literal["csv", "jsonl"]
# Format → (media type, file extension).
FORMATS: dict[Format, tuple[str, str]] = {
    "csv": ("text/csv; charset=utf-8", "csv"),
    "jsonl": ("application/x-ndjson", "jsonl"),
}


async def _images(session: AsyncSession, ids: Sequence[int]) -> dict[int, list[str]]:
    images: dict[int, list[str]] = defaultdict(list)
    rows = await session.execute(
        select(ProductImage.product_id, ProductImage.image_url)
        .where(ProductImage.product_id.in_(ids))
        .order_by(ProductImage.product_id, ProductImage.position)
    )
    for product_id, url in rows:
        images[product_id].append(url)
    return images


async def records(
    db: Database, filters: ProductFilters, chunk_rows: int = CHUNK_ROWS
) -> AsyncIterator[list[dict[str, Any]]]:
    """Product records of the matching products, ``chunk_rows`` per list, by id."""
    after = 0
    while True:
        async with db.reader() as session:
            dialect = session.get_bind().dialect.name
            products = list(await session.scalars(chunk_query(dialect, filters, after, chunk_rows)))
            if not products:
                return
            images = await _images(session, [p.id for p in products])
        yield [product_record(p, images[p.id]) for p in products]
        if len(products) < chunk_rows:
            return
        after = products[-1].id


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(value)
    return value


def _csv(rows: list[dict[str, Any]] | None) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    if rows is None:
        writer.writerow(CSV_FIELDS)
    else:
        writer.writerows([_csv_value(row[f]) for f in CSV_FIELDS] for row in rows)
    return buffer.getvalue()


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


async def stream(
    db: Database, filters: ProductFilters, fmt: Format, chunk_rows: int = CHUNK_ROWS
) -> AsyncIterator[bytes]:
    """The export body, one encoded chunk per database page (CSV starts with its header)."""
    if fmt == "csv":
        yield _csv(None).encode()
    async for rows in records(db, filters, chunk_rows):
        yield (_csv(rows) if fmt == "csv" else _jsonl(rows)).encode()
