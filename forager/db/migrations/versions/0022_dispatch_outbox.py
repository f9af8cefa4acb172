"""Celery dispatch (issue 18): the outbox of claimed task ids the relay publishes to RabbitMQ.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = forager.db.types.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "dispatch_outbox",
        sa.Column("id", _ID, nullable=False),
        sa.Column("task_id", _ID, nullable=False),
        sa.Column("queue", sa.String(length=20), nullable=False),
        sa.Column("lease_owner", sa.String(length=255), nullable=False),
        sa.Column("created_at", _TS(), nullable=False),
        sa.Column("sent_at", _TS(), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["crawl_tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_dispatch_outbox_unsent", "dispatch_outbox", ["sent_at", "id"])
    op.create_index("ix_dispatch_outbox_task_id", "dispatch_outbox", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_dispatch_outbox_task_id", table_name="dispatch_outbox")
    op.drop_index("ix_dispatch_outbox_unsent", table_name="dispatch_outbox")
    op.drop_table("dispatch_outbox")
