"""Rows and bytes of every table, for ``/metrics`` (what retention keeps in check).

PostgreSQL: the planner's row estimate (``pg_class.reltuples``, kept by ANALYZE and autovacuum;
an exact ``count(*)`` only for a table never analyzed) and ``pg_total_relation_size`` (table,
indexes and TOAST). SQLite: an exact ``count(*)`` per table (SQLite keeps no estimate) and the
bytes of the table's and its indexes' pages from the ``dbstat`` virtual table when the library
has it (the Python build here does); without it no per-table bytes, only the file's
(``page_count × page_size``, reported as table ``*``). Both read every table, so callers cache
the result off the request path (``forager.api.metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam, func, select, table, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.models import Base


@dataclass(frozen=True, slots=True)
class TableSize:
    table: str
    rows: int
    bytes: int | None  # None: unknown (SQLite without dbstat)


def _tables() -> list[str]:
    return sorted(Base.metadata.tables)


async def table_sizes(session: AsyncSession) -> list[TableSize]:
    """Rows and bytes of each of Forager's tables, by name."""
    if session.get_bind().dialect.name == "postgresql":
        return await _postgresql(session)
    return await _sqlite(session)


async def _postgresql(session: AsyncSession) -> list[TableSize]:
    found = {
        name: (int(rows), int(size))
        for name, rows, size in await session.execute(
            text(
                "SELECT c.relname, c.reltuples, pg_total_relation_size(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
                "AND c.relname IN :names"
            ).bindparams(bindparam("names", expanding=True)),
            {"names": _tables()},
        )
    }
    sizes = []
    for name in _tables():
        if name not in found:
            continue
        rows, size = found[name]
        if rows < 0:  # never analyzed (PostgreSQL 14+): small or new, so counted
            rows = await session.scalar(select(func.count()).select_from(table(name))) or 0
        sizes.append(TableSize(name, rows, size))
    return sizes


async def _sqlite(session: AsyncSession) -> list[TableSize]:
    pages: dict[str, int] | None
    try:
        pages = {
            name: int(size or 0)
            for name, size in await session.execute(
                text(
                    "SELECT coalesce(m.tbl_name, d.name), sum(d.pgsize) FROM dbstat d "
                    "LEFT JOIN sqlite_master m ON m.name = d.name GROUP BY 1"
                )
            )
        }
    except OperationalError:  # a SQLite built without SQLITE_ENABLE_DBSTAT_VTAB
        pages = None
    sizes = []
    for name in _tables():
        rows = await session.scalar(select(func.count()).select_from(table(name))) or 0
        sizes.append(TableSize(name, rows, None if pages is None else pages.get(name, 0)))
    if pages is None:
        count = await session.scalar(text("PRAGMA page_count")) or 0
        size = await session.scalar(text("PRAGMA page_size")) or 0
        sizes.append(TableSize("*", sum(s.rows for s in sizes), int(count) * int(size)))
    return sizes
