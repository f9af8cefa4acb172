"""Streaming exports of items as CSV or JSON Lines, keyset-paged like the products' export.

JSONL gives each item record with its ``data`` object; CSV gives one row per item with
``data`` as one canonical JSON cell (item kinds have fields of their own, so no fixed columns).
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from typing import Any

from forager.db.engine import Database
from forager.items.records import ITEM_FIELDS, item_record
from forager.items.search import ItemFilters, chunk_query
from forager.parse.items import canonical
from forager.products.export import CHUNK_ROWS, FORMATS, Format, csv_cell, jsonl

__all__ = ["FORMATS", "Format", "records", "stream"]


async def records(
    db: Database, filters: ItemFilters, chunk_rows: int = CHUNK_ROWS
) -> AsyncIterator[list[dict[str, Any]]]:
    """Records of the matching items, ``chunk_rows`` per list, by id."""
    after = 0
    while True:
        async with db.reader() as session:
            items = list(await session.scalars(chunk_query(filters, after, chunk_rows)))
        if not items:
            return
        yield [item_record(i) for i in items]
        if len(items) < chunk_rows:
            return
        after = items[-1].id


def _csv(rows: list[dict[str, Any]] | None) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    if rows is None:
        writer.writerow(ITEM_FIELDS)
    else:
        writer.writerows(
            [csv_cell(canonical(row[f]) if f == "data" else row[f]) for f in ITEM_FIELDS]
            for row in rows
        )
    return buffer.getvalue()


async def stream(
    db: Database, filters: ItemFilters, fmt: Format, chunk_rows: int = CHUNK_ROWS
) -> AsyncIterator[bytes]:
    """The export body, one encoded chunk per database page (CSV starts with its header)."""
    if fmt == "csv":
        yield _csv(None).encode()
    async for rows in records(db, filters, chunk_rows):
        yield (_csv(rows) if fmt == "csv" else jsonl(rows)).encode()
