"""Live monitors (issue 15, seed scraper-resilience): monitors, their change history, the
scraper health log and the scraper error log.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import forager.db.types

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_TS = forager.db.types.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "monitors",
        sa.Column("id", _ID, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=True),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("fetcher", sa.String(length=20), nullable=False),
        sa.Column("parser_name", sa.String(length=100), nullable=True),
        sa.Column("selector_type", sa.String(length=10), nullable=True),
        sa.Column("selectors", _JSON, nullable=True),
        sa.Column("state_field", sa.String(length=64), nullable=True),
        sa.Column("end_states", _JSON, nullable=True),
        sa.Column("last_state", sa.String(length=200), nullable=True),
        sa.Column("interval_seconds", sa.Float(), nullable=False),
        sa.Column("min_interval_seconds", sa.Float(), nullable=False),
        sa.Column("max_interval_seconds", sa.Float(), nullable=False),
        sa.Column("current_interval_seconds", sa.Float(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("health_status", sa.String(length=10), nullable=False),
        sa.Column("lease_owner", sa.String(length=255), nullable=True),
        sa.Column("lease_expires_at", _TS(), nullable=True),
        sa.Column("next_poll_at", _TS(), nullable=True),
        sa.Column("scraper_id", sa.String(length=36), nullable=True),
        sa.Column("run_started_at", _TS(), nullable=True),
        sa.Column("total_polls", sa.BigInteger(), nullable=False),
        sa.Column("total_updates", sa.BigInteger(), nullable=False),
        sa.Column("total_changes", sa.BigInteger(), nullable=False),
        sa.Column("total_errors", sa.BigInteger(), nullable=False),
        sa.Column("consecutive_errors", sa.Integer(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("breaker_state", sa.String(length=10), nullable=False),
        sa.Column("breaker_failures", sa.Integer(), nullable=False),
        sa.Column("breaker_successes", sa.Integer(), nullable=False),
        sa.Column("breaker_opened_at", _TS(), nullable=True),
        sa.Column("breaker_rejections", sa.BigInteger(), nullable=False),
        sa.Column("breaker_changed_at", _TS(), nullable=True),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        sa.Column("last_success_at", _TS(), nullable=True),
        sa.Column("last_change_at", _TS(), nullable=True),
        sa.Column("last_error_at", _TS(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_latency_ms", sa.Integer(), nullable=True),
        sa.Column("latency_buckets", _JSON, nullable=True),
        sa.Column("latency_sum_ms", sa.BigInteger(), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("cpu_percent", sa.Float(), nullable=True),
        sa.Column("created_at", _TS(), nullable=False),
        sa.Column("updated_at", _TS(), nullable=False),
        sa.CheckConstraint(
            "fetcher IN ('http', 'impersonate', 'browser')", name="ck_monitors_fetcher"
        ),
        sa.CheckConstraint(
            "status IN ('active', 'stale', 'stopped', 'error', 'paused')",
            name="ck_monitors_status",
        ),
        sa.CheckConstraint(
            "health_status IN ('healthy', 'degraded', 'failing')", name="ck_monitors_health"
        ),
        sa.CheckConstraint(
            "min_interval_seconds <= interval_seconds AND interval_seconds <= max_interval_seconds",
            name="ck_monitors_interval_bounds",
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("idx_monitors_enabled_lease", "monitors", ["enabled", "lease_expires_at"])
    op.create_index("idx_monitors_status", "monitors", ["status"])

    op.create_table(
        "monitor_snapshots",
        sa.Column("id", _ID, nullable=False),
        sa.Column("monitor_id", _ID, nullable=False),
        sa.Column("data", _JSON, nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("observed_at", _TS(), nullable=False),
        sa.Column("scraper_id", sa.String(length=36), nullable=True),
        sa.Column("update_latency_ms", sa.Integer(), nullable=True),
        sa.Column("data_source", sa.String(length=50), nullable=False),
        sa.ForeignKeyConstraint(["monitor_id"], ["monitors.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "idx_monitor_snapshots_monitor", "monitor_snapshots", ["monitor_id", "observed_at"]
    )

    op.create_table(
        "scraper_health_log",
        sa.Column("id", _ID, nullable=False),
        sa.Column("scraper_id", sa.String(length=36), nullable=False),
        sa.Column("monitor_id", _ID, nullable=True),
        sa.Column("timestamp", _TS(), nullable=False),
        sa.Column("health_status", sa.String(length=20), nullable=False),
        sa.Column("error_count", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.Float(), nullable=True),
        sa.Column("cpu_percent", sa.Float(), nullable=True),
        sa.Column("update_latency_ms", sa.Integer(), nullable=True),
        sa.Column("polling_interval_seconds", sa.Float(), nullable=True),
        sa.Column("uptime_seconds", sa.Integer(), nullable=True),
        sa.Column("last_update_age_seconds", sa.Integer(), nullable=True),
        sa.Column("event", sa.String(length=20), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "idx_health_scraper_timestamp", "scraper_health_log", ["scraper_id", "timestamp"]
    )
    op.create_index(
        "idx_health_monitor_timestamp", "scraper_health_log", ["monitor_id", "timestamp"]
    )
    op.create_index("idx_health_status", "scraper_health_log", ["health_status", "timestamp"])

    op.create_table(
        "scraper_errors",
        sa.Column("id", _ID, nullable=False),
        sa.Column("scraper_id", sa.String(length=36), nullable=False),
        sa.Column("monitor_id", _ID, nullable=True),
        sa.Column("timestamp", _TS(), nullable=False),
        sa.Column("error_type", sa.String(length=50), nullable=False),
        sa.Column("category", sa.String(length=20), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("stack_trace", sa.Text(), nullable=True),
        sa.Column("url", sa.String(length=2048), nullable=True),
        sa.Column("operation", sa.String(length=100), nullable=True),
        sa.Column("retry_attempt", sa.Integer(), nullable=False),
        sa.Column("resolved", sa.Boolean(), nullable=False),
        sa.Column("resolution_time", _TS(), nullable=True),
        sa.Column("resolution_method", sa.String(length=50), nullable=True),
        sa.CheckConstraint(
            "category IN ('network', 'parsing', 'browser', 'database', 'auth')",
            name="ck_scraper_errors_category",
        ),
        sa.CheckConstraint(
            "resolution_method IS NULL OR resolution_method IN "
            "('auto_retry', 'circuit_breaker', 'manual', 'restart')",
            name="ck_scraper_errors_resolution",
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("idx_errors_scraper_timestamp", "scraper_errors", ["scraper_id", "timestamp"])
    op.create_index("idx_errors_monitor", "scraper_errors", ["monitor_id", "resolved"])
    op.create_index("idx_errors_type", "scraper_errors", ["error_type", "timestamp"])
    op.create_index("idx_errors_unresolved", "scraper_errors", ["resolved", "timestamp"])
    op.create_index("idx_errors_timestamp", "scraper_errors", ["timestamp"])

    # Worker processes report their resources too (issue 15: self-supervision).
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("memory_bytes", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("cpu_percent", sa.Float(), nullable=True))
        batch.add_column(sa.Column("recycled", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("recycled")
        batch.drop_column("cpu_percent")
        batch.drop_column("memory_bytes")
    op.drop_table("scraper_errors")
    op.drop_table("scraper_health_log")
    op.drop_table("monitor_snapshots")
    op.drop_table("monitors")
