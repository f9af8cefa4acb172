"""The claim's per-domain lookup at scale (issue 32): an index on a domain's tasks in claim
order.

A claim asks, for each candidate domain, its best due task (``status = 'pending'``, by priority,
schedule and id). ``ix_crawl_tasks_claim`` (status, priority, scheduled_at, id) has no domain:
for a domain with nothing due the lookup reads every due task of every domain before it gives
up, so a claim grew with the frontier (bench/frontier.py: 0.5 s at 100,000 tasks, 12.9 s at
1,000,000; with this index 30 ms, 26 ms, and 24 ms at 10,000,000). ``ix_crawl_tasks_domain_due``
(domain_id, status, priority, scheduled_at, id) answers it with one index probe whatever the
size. ``ix_crawl_tasks_domain_status`` stays: on SQLite its entries within (domain, status) are
in id order, which the task list's newest page relies on. Plain ``CREATE INDEX`` on both
engines.

Revision ID: 0036
Revises: 0035
"""

from __future__ import annotations

from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_crawl_tasks_domain_due",
        "crawl_tasks",
        ["domain_id", "status", "priority", "scheduled_at", "id"],
    )


def downgrade() -> None:
    op.drop_index("ix_crawl_tasks_domain_due", table_name="crawl_tasks")
