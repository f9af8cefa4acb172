"""Product data quality: per-field confidence and validation violations of the latest parse.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    # Plain ADD COLUMN (no batch copy): SQLite keeps the products FTS triggers of 0002.
    op.add_column("products", sa.Column("field_confidence", _JSON, nullable=True))
    op.add_column("products", sa.Column("quality_issues", _JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("products", recreate="never") as batch_op:
        batch_op.drop_column("quality_issues")
        batch_op.drop_column("field_confidence")
