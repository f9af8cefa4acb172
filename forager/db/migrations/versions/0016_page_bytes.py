"""Page retention (issue 18): the stored size of each fetched page, for /metrics' stored bytes.

Revision ID: 0016
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("crawl_attempts", sa.Column("page_bytes", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("crawl_attempts") as batch:
        batch.drop_column("page_bytes")
