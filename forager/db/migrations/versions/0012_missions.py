"""Missions (issue 16, seed 003): worker services, writers, missions, the control row, ads,
and the proxies' mission lease (``name``, ``in_use_by_worker_id``).

Revision ID: 0012
Revises: 0010
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import forager.db.types

revision = "0012"
down_revision = "0010"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _partial(where: str) -> dict[str, Any]:
    return {"postgresql_where": sa.text(where), "sqlite_where": sa.text(where)}


def _stamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", forager.db.types.UTCDateTime(), nullable=False),
        sa.Column("updated_at", forager.db.types.UTCDateTime(), nullable=False),
    ]


def _tested() -> list[sa.Column[object]]:
    return [
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("last_test_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("last_test_ok", sa.Boolean(), nullable=True),
    ]


def upgrade() -> None:
    op.create_table(
        "worker_services",
        sa.Column("id", _ID, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("url", sa.String(length=500), nullable=False),
        sa.Column("api_key", sa.String(length=512), nullable=False),
        sa.Column("storage_domain", sa.String(length=255), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("session_count", sa.Integer(), nullable=False),
        sa.Column("current_mission_id", _ID, nullable=True),
        *_tested(),
        sa.Column("session_started_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("last_proxy_id", _ID, nullable=True),
        sa.Column("last_error_code", sa.String(length=20), nullable=True),
        sa.Column("last_error_at", forager.db.types.UTCDateTime(), nullable=True),
        *_stamps(),
        sa.CheckConstraint(
            "status IN ('idle', 'initializing', 'ready', 'scraping', 'error')",
            name="ck_worker_services_status",
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_index("idx_workers_active", "worker_services", ["active"], **_partial("active"))
    op.create_index("idx_workers_status", "worker_services", ["status"])

    op.create_table(
        "writers",
        sa.Column("id", _ID, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("url", sa.String(length=500), nullable=False),
        sa.Column("api_key", sa.String(length=512), nullable=False),
        *_tested(),
        *_stamps(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )

    op.create_table(
        "missions",
        sa.Column("id", _ID, nullable=False),
        sa.Column("date_start", sa.Date(), nullable=False),
        sa.Column("date_end", sa.Date(), nullable=False),
        sa.Column("media_type", sa.String(length=10), nullable=False),
        sa.Column("languages", _JSON, nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("checkpoint", sa.String(length=20), nullable=True),
        sa.Column("worker_id", _ID, nullable=True),
        sa.Column("worker_job_id", sa.String(length=100), nullable=True),
        sa.Column("worker_data_url", sa.Text(), nullable=True),
        sa.Column("proxy_used", sa.String(length=200), nullable=True),
        sa.Column("writer_id", _ID, nullable=True),
        sa.Column("writer_job_id", sa.String(length=100), nullable=True),
        sa.Column("ads_count", sa.Integer(), nullable=True),
        sa.Column("error_code", sa.String(length=20), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("retry_count", sa.Integer(), nullable=False),
        sa.Column("writer_retry_count", sa.Integer(), nullable=False),
        sa.Column("queued_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("started_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("job_started_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("writer_started_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("finished_at", forager.db.types.UTCDateTime(), nullable=True),
        *_stamps(),
        sa.CheckConstraint(
            "media_type IN ('all', 'video', 'image')", name="ck_missions_media_type"
        ),
        sa.CheckConstraint(
            "status IN ('draft', 'queued', 'running', 'completed', 'failed', 'canceled')",
            name="ck_missions_status",
        ),
        sa.CheckConstraint(
            "checkpoint IN ('atribuido', 'extracao', 'armazenamento', 'finalizado')",
            name="ck_missions_checkpoint",
        ),
        sa.CheckConstraint("date_end >= date_start", name="ck_missions_dates"),
        sa.ForeignKeyConstraint(["worker_id"], ["worker_services.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["writer_id"], ["writers.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("idx_missions_status", "missions", ["status"])
    op.create_index(
        "idx_missions_checkpoint", "missions", ["checkpoint"], **_partial("checkpoint IS NOT NULL")
    )
    op.create_index("idx_missions_dates", "missions", ["date_start", "date_end"])
    op.create_index(
        "idx_missions_worker", "missions", ["worker_id"], **_partial("status = 'running'")
    )
    op.create_index(
        "idx_missions_queued", "missions", ["queued_at"], **_partial("status = 'queued'")
    )
    op.create_index("ix_missions_updated_at", "missions", ["updated_at"])

    control = op.create_table(
        "mission_control",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_limit", sa.Integer(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("run_requested", sa.Boolean(), nullable=False),
        sa.Column("run_generation", sa.Integer(), nullable=False),
        sa.Column("leader_id", sa.String(length=255), nullable=True),
        sa.Column("leader_expires_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("run_started_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("run_ended_at", forager.db.types.UTCDateTime(), nullable=True),
        sa.Column("updated_at", forager.db.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(
        control,
        [
            {
                "id": 1,
                "session_limit": 5,
                "max_retries": 2,
                "run_requested": False,
                "run_generation": 0,
                "updated_at": forager.db.types.utcnow(),
            }
        ],
    )

    op.create_table(
        "ads",
        sa.Column("id", sa.String(length=100), nullable=False),
        sa.Column("page_name", sa.String(length=255), nullable=True),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column("media_type", sa.String(length=10), nullable=True),
        sa.Column("language", sa.String(length=8), nullable=True),
        sa.Column("start_date", sa.Date(), nullable=True),
        sa.Column("qtd_ads", sa.Integer(), nullable=True),
        sa.Column("landing_url", sa.Text(), nullable=True),
        sa.Column("media_url", sa.Text(), nullable=True),
        *_stamps(),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_ads_start_date", "ads", ["start_date"])

    with op.batch_alter_table("proxies", schema=None) as batch_op:
        batch_op.add_column(sa.Column("name", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("in_use_by_worker_id", _ID, nullable=True))
        batch_op.create_foreign_key(
            "fk_proxies_in_use_by_worker_id",
            "worker_services",
            ["in_use_by_worker_id"],
            ["id"],
            ondelete="SET NULL",
        )
    op.create_index(
        "idx_proxies_available",
        "proxies",
        ["is_active", "in_use_by_worker_id"],
        **_partial("is_active AND in_use_by_worker_id IS NULL"),
    )
    op.create_index(
        "idx_proxies_in_use",
        "proxies",
        ["in_use_by_worker_id"],
        **_partial("in_use_by_worker_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("idx_proxies_in_use", table_name="proxies")
    op.drop_index("idx_proxies_available", table_name="proxies")
    with op.batch_alter_table("proxies", schema=None) as batch_op:
        batch_op.drop_constraint("fk_proxies_in_use_by_worker_id", type_="foreignkey")
        batch_op.drop_column("in_use_by_worker_id")
        batch_op.drop_column("name")
    op.drop_index("ix_ads_start_date", table_name="ads")
    op.drop_table("ads")
    op.drop_table("mission_control")
    for name in (
        "ix_missions_updated_at",
        "idx_missions_queued",
        "idx_missions_worker",
        "idx_missions_dates",
        "idx_missions_checkpoint",
        "idx_missions_status",
    ):
        op.drop_index(name, table_name="missions")
    op.drop_table("missions")
    op.drop_table("writers")
    op.drop_index("idx_workers_status", table_name="worker_services")
    op.drop_index("idx_workers_active", table_name="worker_services")
    op.drop_table("worker_services")
