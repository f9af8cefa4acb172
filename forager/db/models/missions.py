"""The missions package's tables (``forager.missions``): worker services, writers, missions, the
mission control row and scraped ads."""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Date,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base, Timestamped
from forager.db.types import BigId, JsonDoc, UTCDateTime, utcnow

# -- missions (issue 16, seed 003): remote worker services, writers, missions, scraped ads ---
# Seed 003's ``workers`` are ``worker_services`` (DESIGN.md decision 9); its ``mission_logs``
# are rows of ``events`` (entity_type ``mission`` / ``worker_service``, decision 5). Statuses
# are strings checked by constraints (no native enums: one schema for SQLite and PostgreSQL).
# Proxies gain ``name``, ``in_use_by_worker_id`` and the two §3.4 indexes (see ``proxies.py``).


class ServiceEndpoint(Timestamped):
    """Where a remote service answers and with which key (worker services and writers)."""

    name: Mapped[str] = mapped_column(String(100), unique=True)
    url: Mapped[str] = mapped_column(String(500))
    api_key: Mapped[str] = mapped_column(String(512))  # ciphertext only (crypto.SecretBox)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    last_test_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_test_ok: Mapped[bool | None] = mapped_column(Boolean)


class WorkerService(ServiceEndpoint, Base):
    """A remote scraping service (seed 003 ``workers``): runs sessions and scrape jobs."""

    __tablename__ = "worker_services"
    __table_args__ = (
        CheckConstraint(
            "status IN ('idle', 'initializing', 'ready', 'scraping', 'error')",
            name="ck_worker_services_status",
        ),
        Index(
            "idx_workers_active",
            "active",
            postgresql_where=text("active"),
            sqlite_where=text("active"),
        ),
        Index("idx_workers_status", "status"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    storage_domain: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(20), default="idle")
    session_count: Mapped[int] = mapped_column(Integer, default=0)
    # No foreign key: missions.worker_id already points here, and a key each way is a cycle
    # SQLite can neither create nor drop cleanly. Both are written in one transaction.
    current_mission_id: Mapped[int | None] = mapped_column(BigId)
    # When the current session was asked for (session timeout, session_ready duration).
    session_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The proxy of the previous session (never drawn again next, seed §4.3) and the session
    # error that ended it (logged as the reason of the next ``proxy_rotated``). Plain columns:
    # proxies.in_use_by_worker_id points here already.
    last_proxy_id: Mapped[int | None] = mapped_column(BigId)
    last_error_code: Mapped[str | None] = mapped_column(String(20))
    last_error_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Writer(ServiceEndpoint, Base):
    """A writer service (seed 003 ``writers``): loads a scrape's JSON into a database table."""

    __tablename__ = "writers"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)


class Mission(Timestamped, Base):
    """One ad-library scrape (a date range, a media type, languages) and where it stands."""

    __tablename__ = "missions"
    __table_args__ = (
        CheckConstraint("media_type IN ('all', 'video', 'image')", name="ck_missions_media_type"),
        CheckConstraint(
            "status IN ('draft', 'queued', 'running', 'completed', 'failed', 'canceled')",
            name="ck_missions_status",
        ),
        CheckConstraint(
            "checkpoint IN ('atribuido', 'extracao', 'armazenamento', 'finalizado')",
            name="ck_missions_checkpoint",
        ),
        CheckConstraint("date_end >= date_start", name="ck_missions_dates"),
        Index("idx_missions_status", "status"),
        Index(
            "idx_missions_checkpoint",
            "checkpoint",
            postgresql_where=text("checkpoint IS NOT NULL"),
            sqlite_where=text("checkpoint IS NOT NULL"),
        ),
        Index("idx_missions_dates", "date_start", "date_end"),
        Index(
            "idx_missions_worker",
            "worker_id",
            postgresql_where=text("status = 'running'"),
            sqlite_where=text("status = 'running'"),
        ),
        Index(
            "idx_missions_queued",
            "queued_at",
            postgresql_where=text("status = 'queued'"),
            sqlite_where=text("status = 'queued'"),
        ),
        Index("ix_missions_updated_at", "updated_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    date_start: Mapped[date] = mapped_column(Date)
    date_end: Mapped[date] = mapped_column(Date)
    media_type: Mapped[str] = mapped_column(String(10))
    languages: Mapped[list[str]] = mapped_column(JsonDoc)
    status: Mapped[str] = mapped_column(String(20), default="draft")
    checkpoint: Mapped[str | None] = mapped_column(String(20))
    worker_id: Mapped[int | None] = mapped_column(
        ForeignKey("worker_services.id", ondelete="SET NULL")
    )
    worker_job_id: Mapped[str | None] = mapped_column(String(100))
    worker_data_url: Mapped[str | None] = mapped_column(Text)
    proxy_used: Mapped[str | None] = mapped_column(String(200))
    # Which writer holds writer_job_id (the seed polls "the" writer; Forager may have several).
    writer_id: Mapped[int | None] = mapped_column(ForeignKey("writers.id", ondelete="SET NULL"))
    writer_job_id: Mapped[str | None] = mapped_column(String(100))
    ads_count: Mapped[int | None] = mapped_column(Integer)
    error_code: Mapped[str | None] = mapped_column(String(20))
    error_message: Mapped[str | None] = mapped_column(Text)
    retry_count: Mapped[int] = mapped_column(Integer, default=0)
    # Writer resubmissions spent (the seed allows one, §5.3), inside the shared retry_count.
    writer_retry_count: Mapped[int] = mapped_column(Integer, default=0)
    queued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When the current scrape job and writer job were accepted: their timeouts survive restarts.
    job_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    writer_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class MissionControl(Base):
    """The one row that steers missions: operator settings, the run switch, the leader lease."""

    __tablename__ = "mission_control"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1
    session_limit: Mapped[int] = mapped_column(Integer, default=5)
    max_retries: Mapped[int] = mapped_column(Integer, default=2)
    run_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # Bumped by every "Iniciar": a run that ends only switches off the run it was started for.
    run_generation: Mapped[int] = mapped_column(Integer, default=0)
    leader_id: Mapped[str | None] = mapped_column(String(255))
    leader_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    run_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    run_ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class Ad(Timestamped, Base):
    """A scraped ad, as the reference writer upserts it (conflict key ``id``)."""

    __tablename__ = "ads"
    __table_args__ = (Index("ix_ads_start_date", "start_date"),)

    id: Mapped[str] = mapped_column(String(100), primary_key=True)
    page_name: Mapped[str | None] = mapped_column(String(255))
    body: Mapped[str | None] = mapped_column(Text)
    media_type: Mapped[str | None] = mapped_column(String(10))
    language: Mapped[str | None] = mapped_column(String(8))
    start_date: Mapped[date | None] = mapped_column(Date)
    qtd_ads: Mapped[int | None] = mapped_column(Integer)
    landing_url: Mapped[str | None] = mapped_column(Text)
    media_url: Mapped[str | None] = mapped_column(Text)
