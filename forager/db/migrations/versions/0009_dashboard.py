"""Dashboard (issue 7): an index for "tasks changed since", read once a second by the live
publisher (without it, every poll scans the whole task table).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_crawl_tasks_updated_at", "crawl_tasks", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_crawl_tasks_updated_at", table_name="crawl_tasks")
