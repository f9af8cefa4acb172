"""Workers as last seen (for /health and the dashboard).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("in_flight", sa.Integer(), nullable=False),
        sa.Column("processed", sa.Integer(), nullable=False),
        sa.Column("started_at", forager.db.types.UTCDateTime(), nullable=False),
        sa.Column("last_seen_at", forager.db.types.UTCDateTime(), nullable=False),
        sa.Column("stopped_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_workers_last_seen_at"), ["last_seen_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_workers_last_seen_at"))
    op.drop_table("workers")
