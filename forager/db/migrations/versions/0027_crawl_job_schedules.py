"""Crawl jobs re-run on a schedule (issue 32): every ``rerun_every_seconds`` from the start of
a run, the scheduler starts the next one once the last is done (``next_run_at``).

Plain ``ADD COLUMN`` on both engines: no table copy.

Revision ID: 0027
Revises: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("crawl_jobs", sa.Column("rerun_every_seconds", sa.Integer(), nullable=True))
    op.add_column(
        "crawl_jobs", sa.Column("next_run_at", forager.db.types.UTCDateTime(), nullable=True)
    )
    op.create_index("ix_crawl_jobs_next_run_at", "crawl_jobs", ["next_run_at"])


def downgrade() -> None:
    op.drop_index("ix_crawl_jobs_next_run_at", table_name="crawl_jobs")
    op.execute("ALTER TABLE crawl_jobs DROP COLUMN next_run_at")  # SQLite 3.35+, PostgreSQL
    op.execute("ALTER TABLE crawl_jobs DROP COLUMN rerun_every_seconds")
