"""Agent routing and monitors under their domain's policy (issue 33).

``domains.routing`` is ``any`` (default), ``agents_preferred`` or ``agents_only``: who may
claim the domain's tasks. ``monitors.held_reason`` says why a monitor does not poll now (its
domain switched off, robots.txt, no proxy, the domain's turn). Plain ``ADD COLUMN`` on both
engines: no table copy.

Revision ID: 0030
Revises: 0029
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "domains",
        sa.Column("routing", sa.String(length=20), nullable=False, server_default="any"),
    )
    op.add_column("monitors", sa.Column("held_reason", sa.String(length=300), nullable=True))


def downgrade() -> None:
    op.drop_column("monitors", "held_reason")
    op.drop_column("domains", "routing")
