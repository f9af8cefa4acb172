"""Adaptive recrawl and product tags (issue 17): a recurring task's adaptive frequency (bounds,
current frequency, unchanged streak, the reason), tags of product URLs, and alert rules scoped
to a tag.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_TASK_COLUMNS = (
    "min_crawl_frequency_seconds",
    "max_crawl_frequency_seconds",
    "current_crawl_frequency_seconds",
)


# Plain ADD / DROP COLUMN, never a batch (move and copy) on SQLite: recreating crawl_tasks would
# drop the task counters' triggers (migration 0010).
def upgrade() -> None:
    op.add_column(
        "crawl_tasks",
        sa.Column("adaptive_recrawl", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    for name in _TASK_COLUMNS:
        op.add_column("crawl_tasks", sa.Column(name, sa.Integer(), nullable=True))
    op.add_column(
        "crawl_tasks",
        sa.Column("unchanged_crawls", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "crawl_tasks", sa.Column("crawl_frequency_reason", sa.String(length=120), nullable=True)
    )
    op.create_table(
        "product_tags",
        sa.Column("url_hash", sa.String(length=64), nullable=False),
        sa.Column("tag", sa.String(length=50), nullable=False),
        sa.Column("created_at", forager.db.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("url_hash", "tag"),
    )
    op.create_index("ix_product_tags_tag", "product_tags", ["tag", "url_hash"])
    op.add_column("alert_rules", sa.Column("tag", sa.String(length=50), nullable=True))


def _drop(table: str, column: str) -> None:
    op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")  # SQLite 3.35+ and PostgreSQL


def downgrade() -> None:
    _drop("alert_rules", "tag")
    op.drop_index("ix_product_tags_tag", table_name="product_tags")
    op.drop_table("product_tags")
    for name in ("crawl_frequency_reason", "unchanged_crawls", *reversed(_TASK_COLUMNS)):
        _drop("crawl_tasks", name)
    _drop("crawl_tasks", "adaptive_recrawl")
