"""Every sort of the product list reads an index in its order (migration 0038), on both
engines: a page of 50 never sorts the whole table (issue 36)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from forager.db.engine import Database
from forager.products import search
from forager.products.search import ProductFilters


@pytest.mark.parametrize("sort", sorted(search.SORTS))
async def test_each_sort_reads_an_index_in_its_order(db: Database, sort: str) -> None:
    query = search.filtered(db.dialect, ProductFilters())[0]
    page = query.order_by(*search.ordering(sort)).limit(50)
    async with db.reader() as session:
        sql = str(page.compile(session.get_bind(), compile_kwargs={"literal_binds": True}))
        if db.dialect == "postgresql":
            # An empty table would be scanned and sorted anyway: forbid the sort, then see
            # whether the plan still needs one (an index in the order spares it).
            await session.execute(text("SET LOCAL enable_sort = off"))
            plan = "\n".join((await session.execute(text(f"EXPLAIN {sql}"))).scalars())
            assert "Sort" not in plan, plan
        else:
            rows = (await session.execute(text(f"EXPLAIN QUERY PLAN {sql}"))).all()
            plan = "\n".join(str(row[-1]) for row in rows)
            assert "TEMP B-TREE" not in plan, plan
