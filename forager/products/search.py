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

from sqlalchemy import ColumnElement, Select, false, func, literal_column, select, text
from sqlalchemy.sql import column, table

from forager.db.models import Domain, Product
from forager.db.search_schema import FTS_TABLE
from forager.products import tags

# The stored tsvector ('simple': no stemming and no stop words, any language).
PG_DOCUMENT_SQL = "products.search_document"

_fts = table(FTS_TABLE, column("rowid"))
_WORD = re.compile(r"\w+")


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


def chunk_query(dialect: str, filters: ProductFilters, after_id: int, size: int) -> Select[Any]:
    """One keyset page of an export: matching products with ``id > after_id``, by id."""
    query, _ = filtered(dialect, filters)
    return query.where(Product.id > after_id).order_by(Product.id).limit(size)
