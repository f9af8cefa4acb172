"""The proxies package's tables (``forager.proxies``): the proxy pool and each domain's proxies."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base, Timestamped
from forager.db.types import BigId, Money, UTCDateTime


class Proxy(Timestamped, Base):
    """A proxy server; the password column holds ciphertext only."""

    __tablename__ = "proxies"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    proxy_url: Mapped[str] = mapped_column(String(255))
    proxy_port: Mapped[int] = mapped_column(Integer)
    proxy_protocol: Mapped[str] = mapped_column(String(20), default="http")
    proxy_username: Mapped[str | None] = mapped_column(String(100))
    proxy_password: Mapped[str | None] = mapped_column(String(512))
    is_active: Mapped[bool] = mapped_column(Boolean, default=True, index=True)
    failure_count: Mapped[int] = mapped_column(Integer, default=0, index=True)
    success_count: Mapped[int] = mapped_column(Integer, default=0)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_failure_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    avg_response_time_ms: Mapped[int | None] = mapped_column(Integer)
    country_code: Mapped[str | None] = mapped_column(String(2), index=True)
    city: Mapped[str | None] = mapped_column(String(100))
    provider: Mapped[str | None] = mapped_column(String(100), index=True)
    monthly_cost: Mapped[Decimal | None] = mapped_column(Money)
    max_requests_per_hour: Mapped[int] = mapped_column(Integer, default=1000)
    # Exclusive strategy: the session holding the proxy, until when (issue 5).
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Set when health disabled the proxy: the background re-test is due then (backoff).
    retest_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    retest_count: Mapped[int] = mapped_column(Integer, default=0)
    # The last test fetch (API or background re-test) and whether it passed (seed 003 §3.4).
    last_test_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_test_ok: Mapped[bool | None] = mapped_column(Boolean)
    breaker_state: Mapped[str] = mapped_column(String(10), default="closed")
    breaker_failures: Mapped[int] = mapped_column(Integer, default=0)
    breaker_successes: Mapped[int] = mapped_column(Integer, default=0)
    breaker_opened_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Breaker statistics (issue 15, the seed's CircuitBreaker): every recorded outcome and when
    # the state last changed; ``forager.db.breakers`` writes them. No rejection count: an
    # open breaker's work is skipped by the claim, never offered and refused.
    breaker_total_successes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    breaker_total_failures: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    breaker_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Missions (issue 16): the name seed 003 logs as ``proxy_used``, and the worker service
    # holding the proxy for its session (invisible to crawl selection meanwhile).
    name: Mapped[str | None] = mapped_column(String(200))
    in_use_by_worker_id: Mapped[int | None] = mapped_column(
        ForeignKey("worker_services.id", ondelete="SET NULL")
    )
    # max_requests_per_hour is enforced over this window, shared by every process (0010).
    hour_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    hour_requests: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


# Missions (issue 16, seed 003 §3.4): the proxies free for a session, and those a worker
# service holds.
Index(
    "idx_proxies_available",
    Proxy.is_active,
    Proxy.in_use_by_worker_id,
    postgresql_where=text("is_active AND in_use_by_worker_id IS NULL"),
    sqlite_where=text("is_active AND in_use_by_worker_id IS NULL"),
)
Index(
    "idx_proxies_in_use",
    Proxy.in_use_by_worker_id,
    postgresql_where=text("in_use_by_worker_id IS NOT NULL"),
    sqlite_where=text("in_use_by_worker_id IS NOT NULL"),
)


class DomainProxy(Timestamped, Base):
    """A proxy allowed for a domain, with that domain's own rotation and health counters."""

    __tablename__ = "domain_proxies"
    __table_args__ = (
        UniqueConstraint("domain_id", "proxy_id", name="uq_domain_proxies_domain_proxy"),
        Index("ix_domain_proxies_rotation", "domain_id", "priority", "last_used_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    domain_id: Mapped[int] = mapped_column(ForeignKey("domains.id", ondelete="CASCADE"))
    proxy_id: Mapped[int] = mapped_column(ForeignKey("proxies.id", ondelete="CASCADE"), index=True)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True, index=True)
    priority: Mapped[int] = mapped_column(Integer, default=5)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    success_count: Mapped[int] = mapped_column(Integer, default=0)
    failure_count: Mapped[int] = mapped_column(Integer, default=0)
    avg_response_time_ms: Mapped[int | None] = mapped_column(Integer)
    # admin: assigned by an operator; pool: created when the domain used a global-pool proxy.
    source: Mapped[str] = mapped_column(String(10), default="admin")
    # Rate limit per (domain, proxy): no request through this pair before this instant.
    next_request_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
