"""Product search: full-text index (SQLite FTS5 + triggers, PostgreSQL GIN), updated_at index.

On SQLite ``products_fts`` is an external-content FTS5 table over products (product_name,
brand, description) kept in sync by three triggers; existing rows are indexed with 'rebuild'.
A later batch migration that recreates ``products`` (SQLite "move and copy") drops these
triggers with the table and must create them again (``_SQLITE_TRIGGERS``).

On PostgreSQL a GIN expression index serves ``to_tsvector('simple', …) @@ websearch_to_tsquery``;
the expression must stay equivalent to ``forager.products.search.PG_DOCUMENT_SQL``.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_SQLITE_TRIGGERS = (
    """
    CREATE TRIGGER IF NOT EXISTS products_fts_insert AFTER INSERT ON products BEGIN
        INSERT INTO products_fts (rowid, product_name, brand, description)
        VALUES (new.id, new.product_name, new.brand, new.description);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS products_fts_delete AFTER DELETE ON products BEGIN
        INSERT INTO products_fts (products_fts, rowid, product_name, brand, description)
        VALUES ('delete', old.id, old.product_name, old.brand, old.description);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS products_fts_update
    AFTER UPDATE OF id, product_name, brand, description ON products BEGIN
        INSERT INTO products_fts (products_fts, rowid, product_name, brand, description)
        VALUES ('delete', old.id, old.product_name, old.brand, old.description);
        INSERT INTO products_fts (rowid, product_name, brand, description)
        VALUES (new.id, new.product_name, new.brand, new.description);
    END
    """,
)


def upgrade() -> None:
    op.create_index("ix_products_updated_at", "products", ["updated_at"], unique=False)
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS products_fts USING fts5("
            "product_name, brand, description, content='products', content_rowid='id')"
        )
        for trigger in _SQLITE_TRIGGERS:
            op.execute(trigger)
        op.execute("INSERT INTO products_fts (products_fts) VALUES ('rebuild')")
    else:
        op.execute(
            "CREATE INDEX ix_products_search ON products USING gin ("
            "to_tsvector('simple'::regconfig, product_name || ' ' || coalesce(brand, '') "
            "|| ' ' || coalesce(description, '')))"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS products_fts_{name}")
        op.execute("DROP TABLE IF EXISTS products_fts")
    else:
        op.execute("DROP INDEX IF EXISTS ix_products_search")
    op.drop_index("ix_products_updated_at", table_name="products")
