"""Product images (issue 18): a domain switch to download its products' images into the page
store, and on ``product_images`` the stored copy (content hash, type) and its download state.

Revision ID: 0019
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0019"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("domains", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("download_images", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("product_images", schema=None) as batch_op:
        batch_op.add_column(sa.Column("content_hash", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("content_type", sa.String(length=50), nullable=True))
        batch_op.add_column(sa.Column("fetched_at", forager.db.types.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("fetch_after", forager.db.types.UTCDateTime(), nullable=True))
        batch_op.add_column(
            sa.Column("fetch_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("error", sa.Text(), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_product_images_content_hash"), ["content_hash"], unique=False
        )
        batch_op.create_index(
            "ix_product_images_due",
            ["id"],
            unique=False,
            postgresql_where=sa.text("fetched_at IS NULL"),
            sqlite_where=sa.text("fetched_at IS NULL"),
        )


def downgrade() -> None:
    with op.batch_alter_table("product_images", schema=None) as batch_op:
        batch_op.drop_index("ix_product_images_due")
        batch_op.drop_index(batch_op.f("ix_product_images_content_hash"))
        for name in (
            "error",
            "fetch_attempts",
            "fetch_after",
            "fetched_at",
            "content_type",
            "content_hash",
        ):
            batch_op.drop_column(name)
    with op.batch_alter_table("domains", schema=None) as batch_op:
        batch_op.drop_column("download_images")
