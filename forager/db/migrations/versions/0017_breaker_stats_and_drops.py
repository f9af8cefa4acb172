"""Breaker statistics (issue 15, seed scraper-resilience ``CircuitBreaker``): the domains' and
proxies' breakers count successes and failures and stamp their last state change,
as the monitors' breakers already do; monitors count the snapshots dropped from a full
result queue (seed ``MAX_QUEUE_SIZE``) and keep their recent polls' windows (``/health``'s
updates per minute and latency p95).

Revision ID: 0017
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import forager.db.types

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TABLES = ("domains", "proxies")
_COUNTERS = ("breaker_total_successes", "breaker_total_failures")


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name in _COUNTERS:
                batch_op.add_column(
                    sa.Column(name, sa.BigInteger(), nullable=False, server_default="0")
                )
            batch_op.add_column(
                sa.Column("breaker_changed_at", forager.db.types.UTCDateTime(), nullable=True)
            )
    with op.batch_alter_table("monitors", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("dropped_snapshots", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("poll_windows", _JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("monitors", schema=None) as batch_op:
        batch_op.drop_column("poll_windows")
        batch_op.drop_column("dropped_snapshots")
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("breaker_changed_at")
            for name in reversed(_COUNTERS):
                batch_op.drop_column(name)
