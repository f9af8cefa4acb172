"""Operational alerts and product lookups (issue 35): the episodes of the operational rules,
their window / minimum / monitor / crawl job, and an index for a product's minimum rating.

``alert_episodes`` holds whether a rule is firing for a subject (one row per rule and subject,
moved by compare-and-set). Plain ``ADD COLUMN`` / ``CREATE TABLE`` / ``CREATE INDEX`` on both
engines: no table copy (SQLite keeps the products' full-text triggers).

Revision ID: 0034
Revises: 0033
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = forager.db.types.UTCDateTime
_RULE_COLUMNS = (
    ("window_seconds", sa.Integer()),
    ("min_attempts", sa.Integer()),
    ("monitor_id", _ID),
    ("job_id", _ID),
)


def upgrade() -> None:
    for name, kind in _RULE_COLUMNS:
        op.add_column("alert_rules", sa.Column(name, kind, nullable=True))
    op.create_table(
        "alert_episodes",
        sa.Column("id", _ID, nullable=False),
        sa.Column("rule_id", _ID, nullable=False),
        sa.Column("subject", sa.String(length=300), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("opened_at", _TS(), nullable=True),
        sa.Column("cleared_at", _TS(), nullable=True),
        sa.CheckConstraint("state IN ('firing', 'cleared')", name="ck_alert_episodes_state"),
        sa.ForeignKeyConstraint(["rule_id"], ["alert_rules.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("rule_id", "subject", name="uq_alert_episodes_rule_subject"),
    )
    op.create_index("ix_products_rating", "products", ["rating"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_products_rating", table_name="products")
    op.drop_table("alert_episodes")
    for name, _ in reversed(_RULE_COLUMNS):
        op.execute(f"ALTER TABLE alert_rules DROP COLUMN {name}")  # SQLite 3.35+, PostgreSQL
