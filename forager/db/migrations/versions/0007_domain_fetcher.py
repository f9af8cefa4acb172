"""Fetchers chosen per domain (issue 5): http, impersonate or browser, and the selector the
browser fetcher waits for.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("domains") as batch:
        batch.add_column(
            sa.Column("fetcher", sa.String(length=20), nullable=False, server_default="http")
        )
        batch.add_column(sa.Column("wait_for_selector", sa.String(length=500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("domains") as batch:
        batch.drop_column("wait_for_selector")
        batch.drop_column("fetcher")
