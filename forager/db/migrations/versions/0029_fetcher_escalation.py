"""Fetcher escalation (issue 33): a domain whose fetcher is ``auto`` remembers the fetcher that
last worked, why, since when, and when a cheaper one is tried again.

Plain ``ADD COLUMN`` on both engines: no table copy.

Revision ID: 0029
Revises: 0028
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from forager.db.types import UTCDateTime

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


_COLUMNS = (
    "auto_fetcher",
    "auto_fetcher_reason",
    "auto_fetcher_changed_at",
    "auto_fetcher_probe_at",
)


def upgrade() -> None:
    op.add_column("domains", sa.Column("auto_fetcher", sa.String(20), nullable=True))
    op.add_column("domains", sa.Column("auto_fetcher_reason", sa.String(500), nullable=True))
    op.add_column("domains", sa.Column("auto_fetcher_changed_at", UTCDateTime(), nullable=True))
    op.add_column("domains", sa.Column("auto_fetcher_probe_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    for column in _COLUMNS:
        op.drop_column("domains", column)
