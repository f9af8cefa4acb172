"""Two query shapes every list and summary uses: one page with its total, and counts by value."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession


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


async def count_by(
    session: AsyncSession, column: Any, *where: ColumnElement[bool]
) -> dict[Any, int]:
    """``{value: rows}`` for ``column``, over the rows matching ``where``."""
    query = select(column, func.count()).group_by(column)
    if where:
        query = query.where(*where)
    return {row[0]: row[1] for row in await session.execute(query)}
