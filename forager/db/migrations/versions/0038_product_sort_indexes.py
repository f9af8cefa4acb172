"""The product list's sorts at scale (issue 36): each reads an index in its order.

``sort=-rating`` orders by ``rating DESC NULLS LAST, id DESC``; ``ix_products_rating``
(rating) read backwards gives ``NULLS FIRST`` on PostgreSQL, so every product was read and
sorted (bench/api_latency.py, 100,000 products: 188 ms for a page of 50, EXPLAIN ANALYZE
under load 17; 0.08 ms with this index). ``-price`` was the same. On PostgreSQL
``ix_products_price_desc`` and ``ix_products_rating_desc`` (column DESC NULLS LAST, id DESC)
answer them from their first entries; SQLite, which sorts NULLs first, reads the ascending
ones backwards. The ascending indexes on price, rating and product_name gain ``id``, the
tie-break: without it a rating shared by 2,000 products was sorted in full (incremental sort,
21 ms → 0.08 ms). ``min_price``/``min_rating`` use them as before.

Revision ID: 0038
Revises: 0036
"""

from __future__ import annotations

from alembic import op

revision = "0038"
down_revision = "0036"
branch_labels = None
depends_on = None

_SORTED = {"ix_products_price": "price", "ix_products_rating": "rating"}
_SORTED_TOO = {"ix_products_product_name": "product_name"}


def upgrade() -> None:
    for name, column in {**_SORTED, **_SORTED_TOO}.items():
        op.drop_index(name, table_name="products")
        op.create_index(name, "products", [column, "id"])
    if op.get_bind().dialect.name == "postgresql":
        for name, column in _SORTED.items():
            op.execute(f"CREATE INDEX {name}_desc ON products ({column} DESC NULLS LAST, id DESC)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in _SORTED:
            op.execute(f"DROP INDEX {name}_desc")
    for name, column in {**_SORTED, **_SORTED_TOO}.items():
        op.drop_index(name, table_name="products")
        op.create_index(name, "products", [column])
