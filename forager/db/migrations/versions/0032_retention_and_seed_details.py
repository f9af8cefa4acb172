"""Seed details (issue 35): an ``internal`` crawl failure's stack trace on its task (bounded,
shown to admin keys only), and when a proxy was last tested and whether that test passed
(seed 003 §3.4).

Plain ``ADD COLUMN`` on both engines: no table copy.

Revision ID: 0032
Revises: 0031
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("crawl_tasks", sa.Column("error_trace", sa.Text(), nullable=True))
    op.add_column(
        "proxies", sa.Column("last_test_at", forager.db.types.UTCDateTime(), nullable=True)
    )
    op.add_column("proxies", sa.Column("last_test_ok", sa.Boolean(), nullable=True))


def downgrade() -> None:
    op.drop_column("proxies", "last_test_ok")
    op.drop_column("proxies", "last_test_at")
    op.drop_column("crawl_tasks", "error_trace")
