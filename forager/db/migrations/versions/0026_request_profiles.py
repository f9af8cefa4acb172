"""Request profiles (issue 33): the headers and cookies a domain's fetches carry, secret values
sealed by the SecretBox; a task's own request (method, body, its own profile).

Plain ``ADD COLUMN`` on both engines: no table copy.

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.add_column("domains", sa.Column("request_profile", _JSON, nullable=True))
    op.add_column("crawl_tasks", sa.Column("fetch_request", _JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("crawl_tasks", "fetch_request")
    op.drop_column("domains", "request_profile")
