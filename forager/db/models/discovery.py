"""The discovery package's table (``forager.discovery``): crawl jobs (issue 32, migration 0025).

A discovered task names its job, the page it was found on and its depth in ``crawl_tasks``
(``CrawlTask.job_id`` …); the job row holds the budgets' counters, moved under its lock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, CheckConstraint, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base, Timestamped
from forager.db.types import BigId, JsonDoc, UTCDateTime


class CrawlJob(Timestamped, Base):
    """A crawl from start URLs and sitemaps within a scope, by ordered rules, under budgets."""

    __tablename__ = "crawl_jobs"
    __table_args__ = (
        CheckConstraint(
            "status IN ('running', 'paused', 'cancelled', 'done')", name="ck_crawl_jobs_status"
        ),
        CheckConstraint("scope IN ('host', 'domain', 'hosts')", name="ck_crawl_jobs_scope"),
        Index("ix_crawl_jobs_status", "status"),
        Index("ix_crawl_jobs_next_run_at", "next_run_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20), default="running")
    start_urls: Mapped[list[str]] = mapped_column(JsonDoc)
    sitemap_urls: Mapped[list[str]] = mapped_column(JsonDoc)
    scope: Mapped[str] = mapped_column(String(10))
    hosts: Mapped[list[str]] = mapped_column(JsonDoc)  # the scope's hosts (registrable domains)
    rules: Mapped[list[dict[str, Any]]] = mapped_column(JsonDoc)
    follow_nofollow: Mapped[bool] = mapped_column(Boolean, default=False)
    # Read the Sitemap: lines of the start hosts' robots.txt as the job's sitemaps too.
    robots_sitemaps: Mapped[bool] = mapped_column(Boolean, default=False)
    max_depth: Mapped[int] = mapped_column(Integer)
    max_pages: Mapped[int] = mapped_column(Integer)
    max_duration_seconds: Mapped[int] = mapped_column(Integer)
    max_query_params: Mapped[int] = mapped_column(Integer)
    max_url_length: Mapped[int] = mapped_column(Integer)
    # The budgets' counters: tasks this job queued (never above max_pages), links it saw, and
    # links it refused (out of scope, too deep, over budget, traps).
    pages_queued: Mapped[int] = mapped_column(Integer, default=0)
    links_seen: Mapped[int] = mapped_column(BigInteger, default=0)
    links_refused: Mapped[int] = mapped_column(BigInteger, default=0)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ends_at: Mapped[datetime] = mapped_column(UTCDateTime)  # started_at + max_duration_seconds
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_by: Mapped[str] = mapped_column(String(100), default="api")
    # A schedule (migration 0027): the next run starts this long after the last one started,
    # once it is done (``next_run_at``; None: re-run by hand only).
    rerun_every_seconds: Mapped[int | None] = mapped_column(Integer)
    next_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A request profile over its domains' (migration 0035; forager.domains.profile, secret
    # values sealed): headers, cookies and a user agent every task of the job is fetched with.
    request_profile: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
