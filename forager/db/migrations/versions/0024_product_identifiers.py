"""Identifiers by role (issue 37): a product's GTIN and manufacturer part number beside its sku,
and indexes for finding a product by sku or GTIN.

Plain ``ADD COLUMN`` / ``CREATE INDEX`` on both engines: no table copy, so SQLite keeps the
full-text triggers of migration 0002.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null until a page is parsed again (restart-parsing with outdated: generic v5 fills them).
    op.add_column("products", sa.Column("gtin", sa.String(length=14), nullable=True))
    op.add_column("products", sa.Column("mpn", sa.String(length=100), nullable=True))
    op.create_index("ix_products_gtin", "products", ["gtin"], unique=False)
    op.create_index("ix_products_sku", "products", ["sku"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_products_sku", table_name="products")
    op.drop_index("ix_products_gtin", table_name="products")
    op.drop_column("products", "mpn")  # SQLite 3.35+ and PostgreSQL
    op.drop_column("products", "gtin")
