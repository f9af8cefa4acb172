"""Items (issue 17): records that are not products — ads, listings, snapshots — as versioned
JSON: ``items`` holds each one's current data (unique per domain, kind and key), and
``item_versions`` a row each time its canonical JSON changed.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import forager.db.types

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = forager.db.types.UTCDateTime


def _provenance() -> list[sa.Column[object]]:
    return [
        sa.Column("crawl_task_id", _ID, nullable=True),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("parser_name", sa.String(length=100), nullable=False),
        sa.Column("parser_version", sa.String(length=50), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "items",
        sa.Column("id", _ID, nullable=False),
        sa.Column("domain_id", _ID, nullable=False),
        sa.Column("kind", sa.String(length=50), nullable=False),
        sa.Column("item_key", sa.String(length=500), nullable=False),
        sa.Column("data", _JSON, nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        *_provenance(),
        sa.Column("first_seen_at", _TS(), nullable=False),
        sa.Column("last_seen_at", _TS(), nullable=False),
        sa.Column("changed_at", _TS(), nullable=False),
        sa.ForeignKeyConstraint(["domain_id"], ["domains.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["crawl_task_id"], ["crawl_tasks.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("domain_id", "kind", "item_key", name="uq_items_domain_kind_key"),
    )
    op.create_index("ix_items_changed_at", "items", ["changed_at", "id"])
    op.create_index("ix_items_kind_changed_at", "items", ["kind", "changed_at"])
    op.create_index("ix_items_crawl_task_id", "items", ["crawl_task_id"])
    op.create_table(
        "item_versions",
        sa.Column("id", _ID, nullable=False),
        sa.Column("item_id", _ID, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("data", _JSON, nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        *_provenance(),
        sa.Column("recorded_at", _TS(), nullable=False),
        sa.ForeignKeyConstraint(["item_id"], ["items.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["crawl_task_id"], ["crawl_tasks.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("item_id", "version", name="uq_item_versions_version"),
    )
    if op.get_bind().dialect.name == "postgresql":  # text search: LIKE '%word%' by trigrams
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        op.execute("CREATE INDEX ix_items_search ON items USING gin (search_text gin_trgm_ops)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_items_search")
    op.drop_table("item_versions")
    op.drop_index("ix_items_crawl_task_id", table_name="items")
    op.drop_index("ix_items_kind_changed_at", table_name="items")
    op.drop_index("ix_items_changed_at", table_name="items")
    op.drop_table("items")
