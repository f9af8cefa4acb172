"""Adaptive recrawl and product tags (issue 17): a recurring task's adaptive frequency (bounds,
current frequency, unchanged streak, the reason), tags of product URLs, and alert rules scoped
to a tag.

Revision ID: 0021
Revises: 0017 (the lead re-chains it at merge)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0021"
down_revision = "0017"
branch_labels = None
depends_on = None

_TASK_COLUMNS = (
    "min_crawl_frequency_seconds",
    "max_crawl_frequency_seconds",
    "current_crawl_frequency_seconds",
)


def upgrade() -> None:
    with op.batch_alter_table("crawl_tasks", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("adaptive_recrawl", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        for name in _TASK_COLUMNS:
            batch_op.add_column(sa.Column(name, sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("unchanged_crawls", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("crawl_frequency_reason", sa.String(length=120), nullable=True)
        )
    op.create_table(
        "product_tags",
        sa.Column("url_hash", sa.String(length=64), nullable=False),
        sa.Column("tag", sa.String(length=50), nullable=False),
        sa.Column("created_at", forager.db.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("url_hash", "tag"),
    )
    op.create_index("ix_product_tags_tag", "product_tags", ["tag", "url_hash"])
    with op.batch_alter_table("alert_rules", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tag", sa.String(length=50), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("alert_rules", schema=None) as batch_op:
        batch_op.drop_column("tag")
    op.drop_index("ix_product_tags_tag", table_name="product_tags")
    op.drop_table("product_tags")
    with op.batch_alter_table("crawl_tasks", schema=None) as batch_op:
        batch_op.drop_column("crawl_frequency_reason")
        batch_op.drop_column("unchanged_crawls")
        for name in reversed(_TASK_COLUMNS):
            batch_op.drop_column(name)
        batch_op.drop_column("adaptive_recrawl")
