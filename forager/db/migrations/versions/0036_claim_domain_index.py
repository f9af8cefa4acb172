"""The claim's per-domain lookup at scale (issue 32): an index on a domain's tasks in claim
order.

A claim asks, for each candidate domain, its best due task (``status = 'pending'``, by priority,
schedule and id). ``ix_crawl_tasks_claim`` (status, priority, scheduled_at, id) has no domain:
for a domain with nothing due the lookup reads every due task of every domain before it gives
up, so a claim grew with the frontier (bench/frontier.py: 0.5 s at 100,000 tasks, 12.9 s at
1,000,000; with this index 30 ms, 26 ms, and 24 ms at 10,000,000). ``ix_crawl_tasks_domain_due``
(domain_id, status, priority, scheduled_at, id) answers it with one index probe whatever the
size. ``ix_crawl_tasks_domain_status`` stays: on SQLite its entries within (domain, status) are
in id order, which the task list's newest page relies on.

Migrations run in one transaction, so this is a plain ``CREATE INDEX``, which blocks writes to
``crawl_tasks`` while it builds (minutes at tens of millions of rows). An operator who cannot
stop writes builds it first with ``CREATE INDEX CONCURRENTLY`` (docs/DEPLOY.md, "Upgrading a
large database"); this migration then finds it and builds nothing. An invalid index that a
cancelled concurrent build left behind is dropped and built again.

Revision ID: 0036
Revises: 0035
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


_NAME = "ix_crawl_tasks_domain_due"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        invalid = (
            op.get_bind()
            .execute(
                text(
                    "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                    " WHERE c.relname = :name AND c.relnamespace = current_schema()::regnamespace"
                    " AND NOT i.indisvalid"
                ),
                {"name": _NAME},
            )
            .first()
        )
        if invalid is not None:
            op.drop_index(_NAME, table_name="crawl_tasks")
    op.create_index(
        _NAME,
        "crawl_tasks",
        ["domain_id", "status", "priority", "scheduled_at", "id"],
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index(_NAME, table_name="crawl_tasks")
