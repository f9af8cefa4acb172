"""Batches (issue 35): one index on ``(batch_name, status, id)`` replaces the one on
``batch_name``, so a batch's counts by status read the index alone and its moves walk its tasks
of a status in id order, a bounded chunk at a time.

Revision ID: 0031
Revises: 0030
"""

from __future__ import annotations

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_crawl_tasks_batch_status", "crawl_tasks", ["batch_name", "status", "id"], unique=False
    )
    op.drop_index("ix_crawl_tasks_batch_name", table_name="crawl_tasks")


def downgrade() -> None:
    op.create_index("ix_crawl_tasks_batch_name", "crawl_tasks", ["batch_name"], unique=False)
    op.drop_index("ix_crawl_tasks_batch_status", table_name="crawl_tasks")
