"""Names of the schema objects the models cannot declare (migrations create them), so schema
comparison skips them: the products full-text search (``forager.products.search`` queries it),
the task URL trigram objects (``forager.queue.counts``) and the items' trigram index
(``forager.items.search``).
"""

from __future__ import annotations

FTS_TABLE = "products_fts"  # SQLite: external-content FTS5 table and its shadow tables
PG_SEARCH_INDEX = "ix_products_search"  # PostgreSQL: GIN index on the stored tsvector
PG_DOCUMENT_COLUMN = "search_document"  # PostgreSQL only (migration 0010)
ITEMS_SEARCH_INDEX = "ix_items_search"  # PostgreSQL: pg_trgm GIN on items.search_text
SEARCH_OBJECTS = (FTS_TABLE, PG_SEARCH_INDEX, PG_DOCUMENT_COLUMN, "task_urls", ITEMS_SEARCH_INDEX)


def is_search_object(name: str | None) -> bool:
    """True for the search-only schema objects (``products_fts*``, ``ix_products_search``, …)."""
    return name is not None and name.startswith(SEARCH_OBJECTS)
