"""Home-network agents (issue 6): the registry of agents that dial in over WebSocket.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("token_prefix", sa.String(length=12), nullable=False),
        sa.Column("isp_name", sa.String(length=100), nullable=True),
        sa.Column("external_ip", sa.String(length=45), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("last_heartbeat_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("tasks_completed_count", sa.Integer(), nullable=False),
        sa.Column("tasks_failed_count", sa.Integer(), nullable=False),
        sa.Column("agent_version", sa.String(length=50), nullable=True),
        sa.Column("blocked_reason", sa.String(length=500), nullable=True),
        sa.Column("revoked_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("created_at", forager.db.types.UTCDateTime(), nullable=False),
        sa.Column("updated_at", forager.db.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_agents_status"), ["status"], unique=False)
        batch_op.create_index(batch_op.f("ix_agents_token_hash"), ["token_hash"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_agents_token_hash"))
        batch_op.drop_index(batch_op.f("ix_agents_status"))
    op.drop_table("agents")
