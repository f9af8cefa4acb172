"""Alerts (issue 17): alert rules, the delivery outbox and its attempts.

Revision ID: 0015
Revises: 0013 (the lead re-chains it onto 0014, the parser plugins' migration, at merge)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import forager.db.types

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = forager.db.types.UTCDateTime
_MONEY = forager.db.types.Money


def upgrade() -> None:
    op.create_table(
        "alert_rules",
        sa.Column("id", _ID, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("percent", sa.Float(), nullable=True),
        sa.Column("threshold", _MONEY(precision=14, scale=2), nullable=True),
        sa.Column("min_change_abs", _MONEY(precision=14, scale=2), nullable=True),
        sa.Column("min_change_pct", sa.Float(), nullable=True),
        sa.Column("fire_on_first", sa.Boolean(), nullable=False),
        sa.Column("product_id", _ID, nullable=True),
        sa.Column("domain_id", _ID, nullable=True),
        sa.Column("batch_name", sa.String(length=255), nullable=True),
        sa.Column("channel", sa.String(length=10), nullable=False),
        sa.Column("target_enc", sa.Text(), nullable=False),
        sa.Column("target_display", sa.String(length=300), nullable=False),
        sa.Column("secret_enc", sa.Text(), nullable=True),
        sa.Column("created_at", _TS(), nullable=False),
        sa.Column("updated_at", _TS(), nullable=False),
        sa.CheckConstraint("channel IN ('webhook', 'apprise')", name="ck_alert_rules_channel"),
        sa.ForeignKeyConstraint(["domain_id"], ["domains.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["product_id"], ["products.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_alert_rules_kind_enabled", "alert_rules", ["kind", "enabled"])
    op.create_index("ix_alert_rules_domain_id", "alert_rules", ["domain_id"])
    op.create_index("ix_alert_rules_product_id", "alert_rules", ["product_id"])
    op.create_table(
        "alert_deliveries",
        sa.Column("id", _ID, nullable=False),
        sa.Column("rule_id", _ID, nullable=False),
        sa.Column("event", sa.String(length=30), nullable=False),
        sa.Column("subject_type", sa.String(length=30), nullable=False),
        sa.Column("subject_id", sa.String(length=64), nullable=False),
        sa.Column("payload", _JSON, nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _TS(), nullable=False),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", _TS(), nullable=False),
        sa.Column("delivered_at", _TS(), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'failed')", name="ck_alert_deliveries_status"
        ),
        sa.ForeignKeyConstraint(["rule_id"], ["alert_rules.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_alert_deliveries_due", "alert_deliveries", ["status", "next_attempt_at"])
    op.create_index("ix_alert_deliveries_rule_id", "alert_deliveries", ["rule_id"])
    op.create_index("ix_alert_deliveries_created_at", "alert_deliveries", ["created_at"])
    op.create_table(
        "alert_attempts",
        sa.Column("id", _ID, nullable=False),
        sa.Column("delivery_id", _ID, nullable=False),
        sa.Column("started_at", _TS(), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["delivery_id"], ["alert_deliveries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_alert_attempts_delivery_id", "alert_attempts", ["delivery_id"])


def downgrade() -> None:
    op.drop_table("alert_attempts")
    op.drop_table("alert_deliveries")
    op.drop_table("alert_rules")
