"""The queue's tables (``forager.queue``): crawl tasks and their attempts, the task counters
(``forager.queue.counts``) and Celery dispatch's outbox (``forager.queue.dispatch``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from forager.db.models.base import Base, Timestamped
from forager.db.models.domains import Domain
from forager.db.types import BigId, JsonDoc, UTCDateTime, utcnow


class CrawlTask(Timestamped, Base):
    """One normalized URL and its current state; every fetch of it is a ``CrawlAttempt``."""

    __tablename__ = "crawl_tasks"
    __table_args__ = (
        Index("ix_crawl_tasks_claim", "status", "priority", "scheduled_at", "id"),
        Index("ix_crawl_tasks_domain_status", "domain_id", "status"),
        # A domain's best due task in one probe (the claim; migration 0036).
        Index("ix_crawl_tasks_domain_due", "domain_id", "status", "priority", "scheduled_at", "id"),
        Index("ix_crawl_tasks_lease", "lease_expires_at"),
        Index("ix_crawl_tasks_next_crawl_at", "next_crawl_at"),
        Index("ix_crawl_tasks_updated_at", "updated_at"),  # the dashboard's live publisher
        Index("ix_crawl_tasks_job_status", "job_id", "status"),
        Index("ix_crawl_tasks_batch_status", "batch_name", "status", "id"),  # issue 35
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    domain_id: Mapped[int] = mapped_column(ForeignKey("domains.id", ondelete="RESTRICT"))
    url: Mapped[str] = mapped_column(Text)
    url_hash: Mapped[str] = mapped_column(String(64), unique=True)
    status: Mapped[str] = mapped_column(String(20), default="pending")
    priority: Mapped[int] = mapped_column(Integer, default=5)
    scheduled_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    retry_count: Mapped[int] = mapped_column(Integer, default=0)
    max_retries: Mapped[int] = mapped_column(Integer, default=3)
    error_type: Mapped[str | None] = mapped_column(String(20))
    error_message: Mapped[str | None] = mapped_column(Text)
    # An internal failure's stack trace, bounded (migration 0032); the API shows it to admins.
    error_trace: Mapped[str | None] = mapped_column(Text)
    is_recurring: Mapped[bool] = mapped_column(Boolean, default=False)
    crawl_frequency_seconds: Mapped[int] = mapped_column(Integer, default=86400)
    next_crawl_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    recrawl_count: Mapped[int] = mapped_column(Integer, default=0)
    html_path: Mapped[str | None] = mapped_column(String(512))
    http_status_code: Mapped[int | None] = mapped_column(Integer)
    response_time_ms: Mapped[int | None] = mapped_column(Integer)
    proxy_id: Mapped[int | None] = mapped_column(ForeignKey("proxies.id", ondelete="SET NULL"))
    parser_name: Mapped[str | None] = mapped_column(String(100))
    # A request beyond a bare GET (migration 0026, forager.domains.profile.seal_request):
    # method, body and its content type, the task's own request profile (secrets sealed) and
    # the identity key its url_hash includes. None: a GET with the domain's profile.
    fetch_request: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    batch_name: Mapped[str | None] = mapped_column(String(255))
    created_by: Mapped[str] = mapped_column(String(100), default="api", index=True)
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Adaptive recrawl (migration 0021, issue 17): crawl_frequency_seconds is where it starts;
    # a price or availability change shortens the current frequency, an unchanged crawl
    # lengthens it, within [min, max] (forager.queue.adaptive). NULL when not adaptive.
    adaptive_recrawl: Mapped[bool] = mapped_column(Boolean, default=False)
    min_crawl_frequency_seconds: Mapped[int | None] = mapped_column(Integer)
    max_crawl_frequency_seconds: Mapped[int | None] = mapped_column(Integer)
    current_crawl_frequency_seconds: Mapped[int | None] = mapped_column(Integer)
    unchanged_crawls: Mapped[int] = mapped_column(Integer, default=0)
    crawl_frequency_reason: Mapped[str | None] = mapped_column(String(120))
    # Discovery (migration 0025, issue 32): the crawl job that found this URL, the page it was
    # found on, its depth (a start URL: 0) and what the job's rule said (follow | parse).
    job_id: Mapped[int | None] = mapped_column(BigId)
    found_on_task_id: Mapped[int | None] = mapped_column(BigId)
    depth: Mapped[int | None] = mapped_column(Integer)
    job_action: Mapped[str | None] = mapped_column(String(10))
    # The <lastmod> its job's sitemap gave it: a re-run crawls it again only when it moves on.
    sitemap_lastmod: Mapped[datetime | None] = mapped_column(UTCDateTime)

    domain: Mapped[Domain] = relationship(lazy="raise")


class CrawlAttempt(Base):
    """One fetch (and parse) of a task: what happened, where the page went, how long it took."""

    __tablename__ = "crawl_attempts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    task_id: Mapped[int] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="CASCADE"), index=True
    )
    worker_id: Mapped[str | None] = mapped_column(String(255))
    proxy_id: Mapped[int | None] = mapped_column(ForeignKey("proxies.id", ondelete="SET NULL"))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    phase: Mapped[str] = mapped_column(String(10), default="fetch")  # fetch | parse
    outcome: Mapped[str] = mapped_column(String(20))  # success | retry | failed | discarded
    status_code: Mapped[int | None] = mapped_column(Integer)
    response_time_ms: Mapped[int | None] = mapped_column(Integer)
    bytes_received: Mapped[int | None] = mapped_column(Integer)
    final_url: Mapped[str | None] = mapped_column(Text)
    page_path: Mapped[str | None] = mapped_column(String(512))
    # The stored (gzip) size of the page; both are cleared when retention deletes the page.
    page_bytes: Mapped[int | None] = mapped_column(Integer)
    error_type: Mapped[str | None] = mapped_column(String(20), index=True)
    error_message: Mapped[str | None] = mapped_column(Text)


# -- Task counters (migration 0010) ----------------------------------------------------------


class TaskCountDelta(Base):
    """A signed change to the task counts, appended by triggers on ``crawl_tasks`` only."""

    __tablename__ = "task_count_deltas"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    status: Mapped[str] = mapped_column(String(20))
    priority: Mapped[int] = mapped_column(Integer)
    created_hour: Mapped[int] = mapped_column(BigInteger)  # hours since 1970 (UTC)
    n: Mapped[int] = mapped_column(Integer)
    duration_n: Mapped[int] = mapped_column(Integer)
    duration_sum: Mapped[float] = mapped_column(Float)


class TaskCount(Base):
    """Tasks by status and priority, as of the last fold (``forager.queue.counts``)."""

    __tablename__ = "task_counts"

    status: Mapped[str] = mapped_column(String(20), primary_key=True)
    priority: Mapped[int] = mapped_column(Integer, primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger)


class TaskCountHourly(Base):
    """Tasks by creation hour and status, with the sum of their durations, as of the last fold."""

    __tablename__ = "task_counts_hourly"

    hour: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    status: Mapped[str] = mapped_column(String(20), primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger)
    duration_n: Mapped[int] = mapped_column(BigInteger)
    duration_sum: Mapped[float] = mapped_column(Float)


class DispatchOutbox(Base):
    """Celery dispatch's outbox: one claimed task id to publish to RabbitMQ, written in the
    claim's transaction; the relay publishes it and stamps ``sent_at`` (unsent rows are replayed
    after a crash, so a claim is never stranded between commit and publish)."""

    __tablename__ = "dispatch_outbox"
    __table_args__ = (Index("ix_dispatch_outbox_unsent", "sent_at", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    task_id: Mapped[int] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="CASCADE"), index=True
    )
    queue: Mapped[str] = mapped_column(String(20))  # priority_queue, crawl_queue, parse_queue
    lease_owner: Mapped[str] = mapped_column(String(255))  # the claim's owner, sent along
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
