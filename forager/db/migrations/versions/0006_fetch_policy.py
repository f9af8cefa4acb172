"""Fetch policy (issue 5): proxy strategies and leases, health re-tests, circuit breakers,
robots switch, per-(domain, proxy) rate limits and adaptive throttling.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _breaker_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("breaker_state", sa.String(length=10), nullable=False, server_default="closed"),
        sa.Column("breaker_failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("breaker_successes", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("breaker_opened_at", forager.db.types.UTCDateTime(), nullable=True),
    ]


def upgrade() -> None:
    with op.batch_alter_table("domains", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("proxy_strategy", sa.String(length=20), nullable=False, server_default="lru")
        )
        batch_op.add_column(
            sa.Column("use_global_pool", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("required_country_code", sa.String(length=2), nullable=True))
        batch_op.add_column(
            sa.Column("ignore_robots", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("proxy_rate_limit_rps", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("throttle_delay_seconds", sa.Float(), nullable=True))
        for column in _breaker_columns():
            batch_op.add_column(column)
        batch_op.create_index(
            batch_op.f("ix_domains_breaker_state"), ["breaker_state"], unique=False
        )
    with op.batch_alter_table("proxies", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=255), nullable=True))
        batch_op.add_column(
            sa.Column("lease_expires_at", forager.db.types.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(sa.Column("retest_at", forager.db.types.UTCDateTime(), nullable=True))
        batch_op.add_column(
            sa.Column("retest_count", sa.Integer(), nullable=False, server_default="0")
        )
        for column in _breaker_columns():
            batch_op.add_column(column)
        batch_op.create_index(batch_op.f("ix_proxies_retest_at"), ["retest_at"], unique=False)
    with op.batch_alter_table("domain_proxies", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("source", sa.String(length=10), nullable=False, server_default="admin")
        )
        batch_op.add_column(
            sa.Column("next_request_at", forager.db.types.UTCDateTime(), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("domain_proxies", schema=None) as batch_op:
        batch_op.drop_column("next_request_at")
        batch_op.drop_column("source")
    with op.batch_alter_table("proxies", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_proxies_retest_at"))
        for name in (
            "breaker_opened_at",
            "breaker_successes",
            "breaker_failures",
            "breaker_state",
            "retest_count",
            "retest_at",
            "lease_expires_at",
            "lease_owner",
        ):
            batch_op.drop_column(name)
    with op.batch_alter_table("domains", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_domains_breaker_state"))
        for name in (
            "breaker_opened_at",
            "breaker_successes",
            "breaker_failures",
            "breaker_state",
            "throttle_delay_seconds",
            "proxy_rate_limit_rps",
            "ignore_robots",
            "required_country_code",
            "use_global_pool",
            "proxy_strategy",
        ):
            batch_op.drop_column(name)
