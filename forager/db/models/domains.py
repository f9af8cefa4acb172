"""The domains package's tables (``forager.domains``): a site's settings, and its selector
parser versions (``forager.domains.selectors``)."""

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
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base, Timestamped
from forager.db.types import BigId, JsonDoc, UTCDateTime, utcnow


class Domain(Timestamped, Base):
    """A site: its parser, politeness budget and robots.txt cache."""

    __tablename__ = "domains"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    domain_name: Mapped[str] = mapped_column(String(255), unique=True)
    base_url: Mapped[str] = mapped_column(String(512))
    parser_name: Mapped[str] = mapped_column(String(100), index=True)
    # Float (not the seed's INTEGER) so sub-second politeness is expressible, as in Scrapy.
    crawl_delay_seconds: Mapped[float] = mapped_column(Float, default=1.0)
    max_concurrent_requests: Mapped[int] = mapped_column(Integer, default=5)
    default_crawl_frequency_seconds: Mapped[int] = mapped_column(Integer, default=86400)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True, index=True)
    robots_txt_url: Mapped[str | None] = mapped_column(String(512))
    robots_txt_content: Mapped[str | None] = mapped_column(Text)
    robots_txt_last_fetched: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The file's ``Sitemap:`` URLs, kept each time it is read (sitemap discovery reads them).
    robots_txt_sitemaps: Mapped[list[str] | None] = mapped_column(JsonDoc)
    user_agent: Mapped[str] = mapped_column(String(255))
    # Politeness gate shared by every worker: no claim for this domain before this instant.
    next_fetch_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Fetch policy (issue 5): proxy strategy lru | random | exclusive, the global pool when no
    # proxy is mapped, a required proxy country, robots.txt switch, per-(domain, proxy) rate.
    proxy_strategy: Mapped[str] = mapped_column(String(20), default="lru")
    use_global_pool: Mapped[bool] = mapped_column(Boolean, default=False)
    required_country_code: Mapped[str | None] = mapped_column(String(2))
    ignore_robots: Mapped[bool] = mapped_column(Boolean, default=False)
    proxy_rate_limit_rps: Mapped[float | None] = mapped_column(Float)
    # Adaptive delay (AutoThrottle-like), shared by every worker; never below crawl_delay.
    throttle_delay_seconds: Mapped[float | None] = mapped_column(Float)
    # Circuit breaker (seed 002): closed | open | half_open.
    breaker_state: Mapped[str] = mapped_column(String(10), default="closed", index=True)
    breaker_failures: Mapped[int] = mapped_column(Integer, default=0)
    breaker_successes: Mapped[int] = mapped_column(Integer, default=0)
    breaker_opened_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Breaker statistics (issue 15, the seed's CircuitBreaker): every recorded outcome and when
    # the state last changed; ``forager.db.breakers`` writes them. No rejection count: an
    # open breaker's work is skipped by the claim, never offered and refused.
    breaker_total_successes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    breaker_total_failures: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    breaker_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Fetcher (migration 0007): http | impersonate | browser; the browser waits for this CSS
    # selector when set, else for network idle.
    fetcher: Mapped[str] = mapped_column(String(20), default="http")
    wait_for_selector: Mapped[str | None] = mapped_column(String(500))
    # The selector parser version in use (migration 0014) when parser_name is "selector".
    selector_version: Mapped[int | None] = mapped_column(Integer)
    # Product images (migration 0019): download the products' images into the page store.
    download_images: Mapped[bool] = mapped_column(Boolean, default=False)
    # Request profile (migration 0026): headers, cookies sent with every fetch, secret values
    # sealed by the SecretBox (``forager.domains.profile``); None when there is none.
    request_profile: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    # Fetcher escalation (migration 0029, docs/FETCHING.md): with fetcher "auto", the fetcher
    # that last worked (None: http, the cheapest), why, since when, and when a cheaper one is
    # tried again; every process reads and compare-and-sets these (``forager.worker.escalation``).
    auto_fetcher: Mapped[str | None] = mapped_column(String(20))
    auto_fetcher_reason: Mapped[str | None] = mapped_column(String(500))
    auto_fetcher_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    auto_fetcher_probe_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Agent routing (migration 0030): any | agents_preferred | agents_only — who may claim its
    # tasks (``forager.queue.claim``; docs/AGENTS.md).
    routing: Mapped[str] = mapped_column(String(20), default="any", server_default="any")
    # Sticky sessions (migration 0028): {"max_uses", "max_age_minutes", "warmup_url"}; None when
    # the domain's fetches carry no session (``forager.domains.sticky_sessions``).
    sticky_sessions: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)


class DomainSession(Base):
    """A sticky session (issue 33): a cookie jar, sealed, bound to one proxy, leased to one fetch
    at a time (compare-and-set on ``lease_owner`` / ``lease_expires_at``), retired after its
    domain's max uses or age, or when a fetch through it is blocked."""

    __tablename__ = "domain_sessions"
    __table_args__ = (Index("ix_domain_sessions_domain_state", "domain_id", "state"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    domain_id: Mapped[int] = mapped_column(ForeignKey("domains.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(10), default="active")  # active | retired
    # The cookie jar as JSON ({name: value}), encrypted by the SecretBox: cookies may be secrets.
    cookies_sealed: Mapped[str | None] = mapped_column(Text)
    proxy_id: Mapped[int | None] = mapped_column(ForeignKey("proxies.id", ondelete="SET NULL"))
    uses: Mapped[int] = mapped_column(Integer, default=0)
    error_score: Mapped[float] = mapped_column(Float, default=0.0)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    retired_reason: Mapped[str | None] = mapped_column(String(50))


class SelectorMapVersion(Base):
    """One saved version of a domain's selector map (fields -> CSS / XPath / JSON-LD rules);
    every save is a new version, never an edit (docs/PARSERS.md)."""

    __tablename__ = "selector_parsers"
    __table_args__ = (
        UniqueConstraint("domain_id", "version", name="uq_selector_parsers_domain_version"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    domain_id: Mapped[int] = mapped_column(ForeignKey("domains.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    fields: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    note: Mapped[str | None] = mapped_column(String(500))
    created_by: Mapped[str] = mapped_column(String(100), default="api")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
