"""Discovery (issue 32): crawl jobs, and each discovered task's job, page found on and depth.

``crawl_jobs`` holds a job's scope, rules and budgets and the counters its budgets are held on
(``pages_queued`` is moved under the job row's lock, in the transaction that inserts the tasks).

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import forager.db.types

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = forager.db.types.UTCDateTime
_TASK_COLUMNS = ("job_id", "found_on_task_id", "depth")


# Plain ADD / DROP COLUMN on crawl_tasks, never a batch on SQLite (see 0021).
def upgrade() -> None:
    op.create_table(
        "crawl_jobs",
        sa.Column("id", _ID, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("start_urls", _JSON, nullable=False),
        sa.Column("sitemap_urls", _JSON, nullable=False),
        sa.Column("scope", sa.String(length=10), nullable=False),
        sa.Column("hosts", _JSON, nullable=False),
        sa.Column("rules", _JSON, nullable=False),
        sa.Column("follow_nofollow", sa.Boolean(), nullable=False),
        sa.Column("robots_sitemaps", sa.Boolean(), nullable=False),
        sa.Column("max_depth", sa.Integer(), nullable=False),
        sa.Column("max_pages", sa.Integer(), nullable=False),
        sa.Column("max_duration_seconds", sa.Integer(), nullable=False),
        sa.Column("max_query_params", sa.Integer(), nullable=False),
        sa.Column("max_url_length", sa.Integer(), nullable=False),
        sa.Column("pages_queued", sa.Integer(), nullable=False),
        sa.Column("links_seen", sa.BigInteger(), nullable=False),
        sa.Column("links_refused", sa.BigInteger(), nullable=False),
        sa.Column("started_at", _TS(), nullable=False),
        sa.Column("ends_at", _TS(), nullable=False),
        sa.Column("finished_at", _TS(), nullable=True),
        sa.Column("created_by", sa.String(length=100), nullable=False),
        sa.Column("created_at", _TS(), nullable=False),
        sa.Column("updated_at", _TS(), nullable=False),
        sa.CheckConstraint(
            "status IN ('running', 'paused', 'cancelled', 'done')", name="ck_crawl_jobs_status"
        ),
        sa.CheckConstraint("scope IN ('host', 'domain', 'hosts')", name="ck_crawl_jobs_scope"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_crawl_jobs_status", "crawl_jobs", ["status"])
    op.add_column("crawl_tasks", sa.Column("job_id", _ID, nullable=True))
    op.add_column("crawl_tasks", sa.Column("found_on_task_id", _ID, nullable=True))
    op.add_column("crawl_tasks", sa.Column("depth", sa.Integer(), nullable=True))
    op.add_column("crawl_tasks", sa.Column("job_action", sa.String(length=10), nullable=True))
    op.add_column("crawl_tasks", sa.Column("sitemap_lastmod", _TS(), nullable=True))
    op.create_index("ix_crawl_tasks_job_status", "crawl_tasks", ["job_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_crawl_tasks_job_status", table_name="crawl_tasks")
    for name in ("sitemap_lastmod", "job_action", *reversed(_TASK_COLUMNS)):
        op.execute(f"ALTER TABLE crawl_tasks DROP COLUMN {name}")  # SQLite 3.35+, PostgreSQL
    op.drop_index("ix_crawl_jobs_status", table_name="crawl_jobs")
    op.drop_table("crawl_jobs")
