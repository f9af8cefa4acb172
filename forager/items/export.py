"""Streaming exports of items as CSV or JSON Lines, keyset-paged like the products' export.

JSONL gives each item record with its ``data`` object; CSV gives one row per item with
``data`` as one canonical JSON cell (item kinds have fields of their own, so no fixed columns).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from forager.db.engine import Database
from forager.items.records import ITEM_FIELDS, item_record
from forager.items.search import ItemFilters, chunk_query
from forager.parse.items import canonical
from forager.products.export import CHUNK_ROWS, Format, csv_cell, encoded


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


def _cell(value: Any) -> Any:
    return csv_cell(canonical(value) if isinstance(value, dict) else value)


def stream(
    db: Database, filters: ItemFilters, fmt: Format, chunk_rows: int = CHUNK_ROWS
) -> AsyncIterator[bytes]:
    """The export body of the matching items (CSV: ``data`` as one canonical JSON cell)."""
    return encoded(records(db, filters, chunk_rows), fmt, ITEM_FIELDS, _cell)
