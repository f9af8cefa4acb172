"""Agent routing (issue 33): a domain's tasks may go to agents only, or to agents first.

``domains.routing`` is ``any`` (default), ``agents_preferred`` or ``agents_only``. Plain
``ADD COLUMN`` with a server default on both engines: no table copy.

Revision ID: 0030
Revises: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "domains",
        sa.Column("routing", sa.String(length=20), nullable=False, server_default="any"),
    )


def downgrade() -> None:
    op.drop_column("domains", "routing")
