"""Product filters and full-text search: the one place that knows each engine's FTS.

SQLite: an external-content FTS5 table ``products_fts`` (product_name, brand, description),
kept in sync by triggers on ``products`` and ranked with ``bm25()``. PostgreSQL: the stored
generated column ``search_document`` (``to_tsvector('simple', …)``, migration 0010) with a GIN
index, ranked with ``ts_rank``: ranking reads the stored vector instead of building it again
for every match. The objects' names live in ``forager.db.search_schema`` (schema comparison
skips them: the models cannot declare them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, Select, false, func, literal_column, or_, select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import column, table

from forager.db.models import Domain, Product
from forager.db.search_schema import FTS_TABLE
from forager.products import tags

# The stored tsvector ('simple': no stemming and no stop words, any language).
PG_DOCUMENT_SQL = "products.search_document"

_fts = table(FTS_TABLE, column("rowid"))
_WORD = re.compile(r"\w+")

# A search ranks (bm25 / ts_rank: a score per match) at most this many of its newest text
# matches; the older matches follow them, newest first. A word every product shares would
# otherwise score the whole catalog for every page (0.2–1.5 s at 100,000 products). A
# search with fewer matches — nearly every real one — is ranked whole, as before.
RANKED_MATCHES = 10_000


def fts5_query(q: str) -> str | None:
    """User input as an FTS5 query of quoted terms (all required), or None without any word.

    Quoting every word means no input can be read as FTS5 syntax (``AND``, ``*``, ``(``,
    ``"``, ``-``, ``NEAR``, column filters): it can never raise a syntax error.
    """
    words = _WORD.findall(q)
    if not words:
        return None
    return " ".join(f'"{w}"' for w in words)


@dataclass(frozen=True, slots=True)
class ProductFilters:
    """What a product listing or export is narrowed to; None means "any"."""

    min_price: Decimal | None = None
    max_price: Decimal | None = None
    currency: str | None = None
    is_available: bool | None = None
    availability: str | None = None
    brand: str | None = None
    category: str | None = None
    domain: str | None = None
    changed_since: datetime | None = None
    q: str | None = None
    tag: str | None = None
    sku: str | None = None  # exact
    gtin: str | None = None  # exact, digits only
    asin: str | None = None  # exact, upper case
    min_rating: Decimal | None = None

    @property
    def searching(self) -> bool:
        return self.q is not None and self.q.strip() != ""


def _conditions(filters: ProductFilters) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if filters.min_price is not None:
        where.append(Product.price >= filters.min_price)
    if filters.max_price is not None:
        where.append(Product.price <= filters.max_price)
    if filters.currency is not None:
        where.append(Product.currency == filters.currency.upper())
    if filters.is_available is not None:
        where.append(Product.is_available.is_(filters.is_available))
    if filters.availability is not None:
        where.append(Product.availability == filters.availability)
    if filters.brand is not None:
        where.append(Product.brand.icontains(filters.brand, autoescape=True))
    if filters.category is not None:
        where.append(Product.category.icontains(filters.category, autoescape=True))
    if filters.domain is not None:
        domain_id = (
            select(Domain.id).where(Domain.domain_name == filters.domain.lower()).scalar_subquery()
        )
        where.append(Product.domain_id == domain_id)
    if filters.changed_since is not None:
        where.append(Product.updated_at >= filters.changed_since)
    if filters.tag is not None:
        where.append(tags.having(filters.tag.strip().lower()))
    if filters.sku is not None:
        where.append(Product.sku == filters.sku.strip())
    if filters.gtin is not None:
        where.append(Product.gtin == filters.gtin)
    if filters.asin is not None:
        where.append(Product.asin == filters.asin)
    if filters.min_rating is not None:
        where.append(Product.rating >= filters.min_rating)
    return where


def filtered(
    dialect: str, filters: ProductFilters, *columns: Any
) -> tuple[Select[Any], ColumnElement[Any] | None]:
    """``SELECT columns FROM products`` narrowed to the filters and the search, if any.

    Returns the statement and the relevance ordering (best first) when searching.
    """
    query = select(*columns) if columns else select(Product)
    query = query.where(*_conditions(filters))
    if not filters.searching:
        return query, None
    assert filters.q is not None
    if dialect == "postgresql":
        document: ColumnElement[Any] = literal_column(PG_DOCUMENT_SQL)
        tsquery = func.websearch_to_tsquery(literal_column("'simple'::regconfig"), filters.q)
        query = query.where(document.op("@@")(tsquery))
        return query, func.ts_rank(document, tsquery).desc()
    match = fts5_query(filters.q)
    if match is None:
        return query.where(false()), None
    query = query.join(_fts, _fts.c.rowid == Product.id).where(
        text(f"{FTS_TABLE} MATCH :fts_query").bindparams(fts_query=match)
    )
    # bm25() is lower for better matches.
    return query, func.bm25(literal_column(FTS_TABLE)).asc()


def list_query(dialect: str, filters: ProductFilters) -> tuple[Select[Any], Select[Any]]:
    """The page query (relevance first when searching, else newest update) and its count."""
    query, rank = filtered(dialect, filters)
    count = filtered(dialect, filters, func.count(Product.id))[0]
    if rank is not None:
        return query.order_by(rank, Product.id.desc()), count
    return query.order_by(Product.updated_at.desc(), Product.id.desc()), count


async def search_page(
    session: AsyncSession, dialect: str, filters: ProductFilters, *, limit: int, offset: int
) -> tuple[list[Product], int, bool]:
    """One page of a search (``filters.q``), its total and whether that total is exact.

    The ranked matches come first (the filtered ones among the newest ``RANKED_MATCHES``
    text matches), then the rest, newest first. Matches are counted up to
    ``RANKED_MATCHES``; past it the total is that many, a lower bound (not exact).
    """
    assert filters.q is not None
    cap = RANKED_MATCHES
    if dialect == "postgresql":
        # Planned for this search's own words every time: a plan cached for a rare word (the
        # GIN index) costs a word every product has 3-4x as much (78 ms instead of 24 at
        # 100,000 products), and asyncpg's prepared statements make PostgreSQL reuse plans.
        await session.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
    matches, _ = filtered(dialect, filters, Product.id)
    total = await session.scalar(
        select(func.count()).select_from(matches.limit(cap + 1).subquery())
    )
    if not total:
        return [], 0, True
    exact = total <= cap
    total = min(total, cap)
    where = _conditions(filters)
    # The newest text matches with their score, computed for those rows only (the scan in
    # id order stops at the limit); the page's ids are picked from them, then loaded.
    if dialect == "postgresql":
        document: ColumnElement[Any] = literal_column(PG_DOCUMENT_SQL)
        tsquery = func.websearch_to_tsquery(literal_column("'simple'::regconfig"), filters.q)
        newest = (
            select(Product.id.label("id"), func.ts_rank(document, tsquery).label("score"))
            .where(document.op("@@")(tsquery))
            .order_by(Product.id.desc())
            .limit(cap)
            .subquery("newest")
        )
        best: ColumnElement[Any] = newest.c.score.desc()
    else:
        match = fts5_query(filters.q)
        if match is None:
            return [], 0, True
        newest = (
            select(_fts.c.rowid.label("id"), func.bm25(literal_column(FTS_TABLE)).label("score"))
            .select_from(_fts)
            .where(text(f"{FTS_TABLE} MATCH :fts_query").bindparams(fts_query=match))
            .order_by(_fts.c.rowid.desc())
            .limit(cap)
            .subquery("newest")
        )
        best = newest.c.score.asc()  # bm25() is lower for better matches
    ranked = select(newest.c.id)
    if where:
        ranked = ranked.join(Product, Product.id == newest.c.id).where(*where)
    ids = list(
        await session.scalars(ranked.order_by(best, newest.c.id.desc()).limit(limit).offset(offset))
    )
    rows = await _load(session, ids)
    if len(rows) == limit:
        return rows, total, exact
    # The page runs past the ranked matches: the older ones follow, newest first.
    counted = await session.execute(select(func.count(), func.min(newest.c.id)))
    text_matches, oldest_ranked = counted.one()
    if text_matches < cap:
        return rows, total, exact  # every match was ranked
    ranked_total = await session.scalar(select(func.count()).select_from(ranked.subquery()))
    rest, _ = filtered(dialect, filters)
    older = await session.scalars(
        rest.where(Product.id < oldest_ranked)
        .order_by(Product.id.desc())
        .limit(limit - len(rows))
        .offset(max(0, offset - (ranked_total or 0)))
    )
    return rows + list(older), total, exact


async def _load(session: AsyncSession, ids: list[int]) -> list[Product]:
    """The products of ``ids``, in that order."""
    if not ids:
        return []
    found = {p.id: p for p in await session.scalars(select(Product).where(Product.id.in_(ids)))}
    return [found[i] for i in ids if i in found]


# The orders a listing or an export can have (``sort``): the column, and whether highest (or
# newest) first. Products without a value (no price, no rating) come last either way, and a
# tie is broken by id in the same direction, so an export can page by (value, id).
SORTS: dict[str, tuple[Any, bool]] = {
    "-updated": (Product.updated_at, True),
    "updated": (Product.updated_at, False),
    "-changed": (Product.updated_at, True),  # updated_at moves only when the content changed
    "changed": (Product.updated_at, False),
    "price": (Product.price, False),
    "-price": (Product.price, True),
    "rating": (Product.rating, False),
    "-rating": (Product.rating, True),
    "name": (Product.product_name, False),
    "-name": (Product.product_name, True),
}


def ordering(sort: str) -> tuple[Any, ...]:
    """The ORDER BY of ``sort`` (one of ``SORTS``)."""
    column, descending = SORTS[sort]
    by = column.desc() if descending else column.asc()
    if column.nullable:  # NULLS LAST only where there are NULLs: it keeps the others' index
        by = by.nulls_last()
    return by, Product.id.desc() if descending else Product.id.asc()


def chunk_query(
    dialect: str,
    filters: ProductFilters,
    after_id: int,
    size: int,
    sort: str | None = None,
    after_value: Any = None,
) -> Select[Any]:
    """One keyset page of an export: matching products after the last one sent — by id
    (``id > after_id``) or, with ``sort``, after ``(after_value, after_id)`` in that order
    (``after_id`` 0: from the start)."""
    query, _ = filtered(dialect, filters)
    if sort is None:
        return query.where(Product.id > after_id).order_by(Product.id).limit(size)
    if after_id:
        query = query.where(_after(sort, after_value, after_id))
    return query.order_by(*ordering(sort)).limit(size)


def _after(sort: str, value: Any, after_id: int) -> ColumnElement[bool]:
    """Rows past ``(value, after_id)`` in the ``sort`` order (missing values last)."""
    column, descending = SORTS[sort]
    beyond_id = Product.id < after_id if descending else Product.id > after_id
    if value is None:  # among the rows without a value, which come last
        missing: ColumnElement[bool] = column.is_(None) & beyond_id
        return missing
    beyond = column < value if descending else column > value
    return or_(beyond, (column == value) & beyond_id, column.is_(None))
