"""Sticky sessions (issue 33): a domain's session policy, and the sessions themselves (a sealed
cookie jar bound to one proxy, leased to one fetch at a time).

Plain ``ADD COLUMN`` and ``CREATE TABLE`` on both engines: no table copy.

Revision ID: 0028
Revises: 0027
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import forager.db.types

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = forager.db.types.UTCDateTime


def upgrade() -> None:
    op.add_column("domains", sa.Column("sticky_sessions", _JSON, nullable=True))
    op.create_table(
        "domain_sessions",
        sa.Column("id", _ID, nullable=False),
        sa.Column("domain_id", _ID, nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("cookies_sealed", sa.Text(), nullable=True),
        sa.Column("proxy_id", _ID, nullable=True),
        sa.Column("uses", sa.Integer(), nullable=False),
        sa.Column("error_score", sa.Float(), nullable=False),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", _TS(), nullable=True),
        sa.Column("created_at", _TS(), nullable=False),
        sa.Column("last_used_at", _TS(), nullable=True),
        sa.Column("retired_at", _TS(), nullable=True),
        sa.Column("retired_reason", sa.String(length=50), nullable=True),
        sa.ForeignKeyConstraint(["domain_id"], ["domains.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["proxy_id"], ["proxies.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_domain_sessions_domain_state", "domain_sessions", ["domain_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_domain_sessions_domain_state", table_name="domain_sessions")
    op.drop_table("domain_sessions")
    op.execute("ALTER TABLE domains DROP COLUMN sticky_sessions")  # SQLite 3.35+, PostgreSQL
