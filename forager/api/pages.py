"""One page of rows as the API returns it: the rows in their public shape, and the total."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.api.deps import Paging
from forager.api.schemas import Page
from forager.db.queries import page

Shape = TypeVar("Shape", bound=BaseModel)


async def paged(
    session: AsyncSession, query: Select[Any], order: Any, paging: Paging, shape: type[Shape]
) -> Page[Shape]:
    """``query`` in ``order`` (a column or a tuple of them), one page, each row as ``shape``."""
    columns = order if isinstance(order, tuple) else (order,)
    rows, total = await page(session, query, *columns, limit=paging.limit, offset=paging.offset)
    items = [shape.model_validate(row) for row in rows]
    return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)
