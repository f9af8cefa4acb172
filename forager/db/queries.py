"""Query shapes the lists, summaries and lookups share: one page with its total (exact, or
capped for lists of millions), counts by value, and one row by id or ``NotFound``."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, func, literal, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.errors import NotFound

Row = TypeVar("Row")


async def page(
    session: AsyncSession,
    query: Select[Any],
    *order_by: Any,
    limit: int,
    offset: int,
) -> tuple[list[Any], int]:
    """One page of ``query`` in ``order_by`` order, and how many rows match in all."""
    total = await session.scalar(select(func.count()).select_from(query.subquery()))
    rows = await session.scalars(query.order_by(*order_by).limit(limit).offset(offset))
    return list(rows), total or 0


async def page_capped(
    session: AsyncSession,
    query: Select[Any],
    *order_by: Any,
    limit: int,
    offset: int,
    cap: int,
) -> tuple[list[Any], int, bool]:
    """Like ``page`` for a list of millions of rows: the total counts at most ``cap`` rows past
    ``offset`` (one more says there are more), and says whether it is exact. A page past the
    end counts the rows before it (no more than the offset's own scan reads)."""

    async def count(offset: int, limit: int) -> int:
        rows = query.with_only_columns(literal(1), maintain_column_froms=True)
        rows = rows.offset(offset).limit(limit)
        return await session.scalar(select(func.count()).select_from(rows.subquery())) or 0

    found = await session.scalars(query.order_by(*order_by).limit(limit).offset(offset))
    rows = list(found)
    past = await count(offset, cap + 1)
    if past == 0 and offset > 0:
        return rows, await count(0, offset), True
    return rows, offset + min(past, cap), past <= cap


async def count_by(
    session: AsyncSession, column: Any, *where: ColumnElement[bool]
) -> dict[Any, int]:
    """``{value: rows}`` for ``column``, over the rows matching ``where``."""
    query = select(column, func.count()).group_by(column)
    if where:
        query = query.where(*where)
    return {row[0]: row[1] for row in await session.execute(query)}


async def get_or_not_found(
    session: AsyncSession, model: type[Row], key: int, missing: str, **options: Any
) -> Row:
    """The ``model`` row whose primary key is ``key``, or ``NotFound(missing)``: the one
    get-or-404 of the services and routers. ``options`` go to ``session.get``
    (``with_for_update``, ``populate_existing``)."""
    row = await session.get(model, key, **options)
    if row is None:
        raise NotFound(missing)
    return row


async def page_and_total(
    session: AsyncSession,
    query: Select[Any],
    *order_by: Any,
    limit: int,
    offset: int,
) -> tuple[list[Any], int]:
    """Like ``page``, in one pass: ``count(*) OVER ()`` rides along with the page.

    Worth it when the rows come from one expensive index search (text, trigrams) that a
    separate count would run again; a page past the end counts on its own.
    """
    counted = query.add_columns(func.count().over().label("page_total"))
    rows = (await session.execute(counted.order_by(*order_by).limit(limit).offset(offset))).all()
    if rows:
        return [row[0] for row in rows], int(rows[0][-1])
    if offset == 0:
        return [], 0
    total = await session.scalar(select(func.count()).select_from(query.subquery()))
    return [], total or 0
