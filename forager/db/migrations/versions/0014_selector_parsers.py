"""Selector parsers (issue 17): versioned per-domain maps of fields to CSS / XPath / JSON-LD
rules, and the version each domain uses.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import forager.db.types

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = forager.db.types.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "selector_parsers",
        sa.Column("id", _ID, nullable=False),
        sa.Column("domain_id", _ID, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("fields", _JSON, nullable=False),
        sa.Column("note", sa.String(length=500), nullable=True),
        sa.Column("created_by", sa.String(length=100), nullable=False),
        sa.Column("created_at", _TS(), nullable=False),
        sa.ForeignKeyConstraint(["domain_id"], ["domains.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("domain_id", "version", name="uq_selector_parsers_domain_version"),
    )
    with op.batch_alter_table("domains") as batch:
        batch.add_column(sa.Column("selector_version", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("domains") as batch:
        batch.drop_column("selector_version")
    op.drop_table("selector_parsers")
