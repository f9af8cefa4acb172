"""robots.txt per RFC 9309 (issue 30): the ``Sitemap:`` lines of a domain's robots.txt.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # Null until robots.txt is next fetched (within a day): that read fills it.
    op.add_column("domains", sa.Column("robots_txt_sitemaps", _JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("domains", "robots_txt_sitemaps")  # SQLite 3.35+ and PostgreSQL
