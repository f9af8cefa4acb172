"""One page of rows as the API returns it: the rows in their public shape, and the total."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field
from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.api.deps import Paging
from forager.db.queries import page

T = TypeVar("T")
Shape = TypeVar("Shape", bound=BaseModel)


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int = Field(description="Rows matching the filters, all pages together.")
    limit: int
    offset: int
    total_exact: bool = Field(
        True,
        description=(
            "False only when the count stopped early: a product search (q) that more than "
            "10,000 products match (total is then 10,000), or an audit-log page (/api/events) "
            "with more than 10,000 events from its offset on (total is then offset + 10,000). "
            "total is then a lower bound (as search engines report broad matches), and the "
            "pages go on past it."
        ),
    )


async def paged(
    session: AsyncSession, query: Select[Any], order: Any, paging: Paging, shape: type[Shape]
) -> Page[Shape]:
    """``query`` in ``order`` (a column or a tuple of them), one page, each row as ``shape``."""
    columns = order if isinstance(order, tuple) else (order,)
    rows, total = await page(session, query, *columns, limit=paging.limit, offset=paging.offset)
    items = [shape.model_validate(row) for row in rows]
    return Page(items=items, total=total, limit=paging.limit, offset=paging.offset)
