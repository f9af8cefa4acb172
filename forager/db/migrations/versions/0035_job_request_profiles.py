"""A crawl job's request profile (issue 33): headers, cookies and a user agent over its domains'
profiles for every task the job discovers, secret values sealed by the SecretBox.

Plain ``ADD COLUMN`` on both engines: no table copy.

Revision ID: 0035
Revises: 0034
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.add_column("crawl_jobs", sa.Column("request_profile", _JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("crawl_jobs", "request_profile")
