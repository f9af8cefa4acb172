"""Streaming exports of products as CSV or JSON Lines, a bounded chunk of rows at a time.

Each chunk is one short read transaction (keyset by id), so an export of any size holds
neither all rows in memory nor one long snapshot open; rows come out in id order.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

from forager.db.engine import Database
from forager.products.records import RECORD_FIELDS, image_urls, product_record
from forager.products.search import SORTS, ProductFilters, chunk_query

CHUNK_ROWS = 500
CSV_FIELDS = (*RECORD_FIELDS, "image_urls", "parser_name", "parser_version")

Format = Literal["csv", "jsonl"]
# Format → (media type, file extension).
FORMATS: dict[Format, tuple[str, str]] = {
    "csv": ("text/csv; charset=utf-8", "csv"),
    "jsonl": ("application/x-ndjson", "jsonl"),
}


async def records(
    db: Database, filters: ProductFilters, chunk_rows: int = CHUNK_ROWS, sort: str | None = None
) -> AsyncIterator[list[dict[str, Any]]]:
    """Product records of the matching products, ``chunk_rows`` per list, by id or in the
    ``sort`` order (``search.SORTS``), each chunk keyset-paged after the last row sent."""
    after, after_value = 0, None
    column = None if sort is None else SORTS[sort][0].key
    while True:
        async with db.reader() as session:
            dialect = session.get_bind().dialect.name
            page = chunk_query(dialect, filters, after, chunk_rows, sort, after_value)
            products = list(await session.scalars(page))
            if not products:
                return
            images = await image_urls(session, [p.id for p in products])
        yield [product_record(p, images[p.id]) for p in products]
        if len(products) < chunk_rows:
            return
        after = products[-1].id
        after_value = None if column is None else getattr(products[-1], column)


# A cell starting with one of these is a formula to Excel and LibreOffice; scraped text is
# untrusted, so such cells get a leading apostrophe (OWASP's advice against CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A value as a safe CSV cell: empty for None, lists space-joined, formulas defused."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        value = " ".join(value)  # then checked like any other text cell
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _csv(
    rows: list[dict[str, Any]] | None,
    fields: Sequence[str] = CSV_FIELDS,
    cell: Callable[[Any], Any] = csv_cell,
) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    if rows is None:
        writer.writerow(fields)
    else:
        writer.writerows([cell(row[f]) for f in fields] for row in rows)
    return buffer.getvalue()


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


async def encoded(
    chunks: AsyncIterator[list[dict[str, Any]]],
    fmt: Format,
    fields: Sequence[str],
    cell: Callable[[Any], Any] = csv_cell,
) -> AsyncIterator[bytes]:
    """Record chunks as an export body: JSON Lines, or CSV of ``fields`` (header first, each
    value through ``cell``), one encoded chunk per database page."""
    if fmt == "csv":
        yield _csv(None, fields, cell).encode()
    async for rows in chunks:
        yield (_csv(rows, fields, cell) if fmt == "csv" else _jsonl(rows)).encode()


def stream(
    db: Database,
    filters: ProductFilters,
    fmt: Format,
    chunk_rows: int = CHUNK_ROWS,
    sort: str | None = None,
) -> AsyncIterator[bytes]:
    """The export body of the matching products (by id, or in the ``sort`` order)."""
    return encoded(records(db, filters, chunk_rows, sort), fmt, CSV_FIELDS)
