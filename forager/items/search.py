"""Item filters and text search: every word of ``q`` must appear in the item's data.

``items.search_text`` holds every text and number of the data, lower-cased (written with the
data, forager/items/persist.py); a word matches as a substring (``LIKE``), which PostgreSQL
serves from a pg_trgm GIN index (migration 0020) and SQLite by scanning the filtered rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, false, func, select

from forager.db.models import Domain, Item

_WORD = re.compile(r"\w+")
MAX_WORDS = 8


@dataclass(frozen=True, slots=True)
class ItemFilters:
    """What an item listing or export is narrowed to; None means "any"."""

    kind: str | None = None
    domain: str | None = None
    changed_since: datetime | None = None
    task_id: int | None = None
    q: str | None = None


def _conditions(filters: ItemFilters) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if filters.kind is not None:
        where.append(Item.kind == filters.kind)
    if filters.domain is not None:
        domain_id = (
            select(Domain.id).where(Domain.domain_name == filters.domain.lower()).scalar_subquery()
        )
        where.append(Item.domain_id == domain_id)
    if filters.changed_since is not None:
        where.append(Item.changed_at >= filters.changed_since)
    if filters.task_id is not None:
        where.append(Item.crawl_task_id == filters.task_id)
    if filters.q is not None:
        words = _WORD.findall(filters.q.lower())[:MAX_WORDS]
        if not words:
            where.append(false())
        where.extend(Item.search_text.like(_anywhere(word), escape="/") for word in words)
    return where


def _anywhere(word: str) -> str:
    """A LIKE pattern of ``word`` anywhere, as one value (so PostgreSQL can plan it against
    the trigram index)."""
    escaped = word.replace("/", "//").replace("%", "/%").replace("_", "/_")
    return f"%{escaped}%"


def filtered(filters: ItemFilters, *columns: Any) -> Select[Any]:
    """``SELECT columns FROM items`` narrowed to the filters."""
    query = select(*columns) if columns else select(Item)
    return query.where(*_conditions(filters))


def list_query(filters: ItemFilters) -> tuple[Select[Any], Select[Any]]:
    """The page query (newest change first) and its count."""
    query = filtered(filters).order_by(Item.changed_at.desc(), Item.id.desc())
    return query, filtered(filters, func.count(Item.id))


def chunk_query(filters: ItemFilters, after_id: int, size: int) -> Select[Any]:
    """One keyset page of an export: matching items with ``id > after_id``, by id."""
    return filtered(filters).where(Item.id > after_id).order_by(Item.id).limit(size)
