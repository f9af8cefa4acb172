"""SQLAlchemy 2 typed models: seeds 004/000 plus DESIGN.md (leases, attempts, events)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from forager.db.types import BigId, JsonDoc, Money, UTCDateTime, utcnow


class Base(DeclarativeBase):
    pass


class Timestamped:
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


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
    # the state last changed; ``forager.fetch.breakers`` writes them. No rejection count: an
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


class CrawlTask(Timestamped, Base):
    """One normalized URL and its current state; every fetch of it is a ``CrawlAttempt``."""

    __tablename__ = "crawl_tasks"
    __table_args__ = (
        Index("ix_crawl_tasks_claim", "status", "priority", "scheduled_at", "id"),
        Index("ix_crawl_tasks_domain_status", "domain_id", "status"),
        Index("ix_crawl_tasks_lease", "lease_expires_at"),
        Index("ix_crawl_tasks_next_crawl_at", "next_crawl_at"),
        Index("ix_crawl_tasks_updated_at", "updated_at"),  # the dashboard's live publisher
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
    is_recurring: Mapped[bool] = mapped_column(Boolean, default=False)
    crawl_frequency_seconds: Mapped[int] = mapped_column(Integer, default=86400)
    next_crawl_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    recrawl_count: Mapped[int] = mapped_column(Integer, default=0)
    html_path: Mapped[str | None] = mapped_column(String(512))
    http_status_code: Mapped[int | None] = mapped_column(Integer)
    response_time_ms: Mapped[int | None] = mapped_column(Integer)
    proxy_id: Mapped[int | None] = mapped_column(ForeignKey("proxies.id", ondelete="SET NULL"))
    parser_name: Mapped[str | None] = mapped_column(String(100))
    batch_name: Mapped[str | None] = mapped_column(String(255), index=True)
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


class Product(Timestamped, Base):
    """The latest extracted record of one product URL (DESIGN.md "Product record")."""

    __tablename__ = "products"
    # Full-text search objects (SQLite FTS5 table, PostgreSQL GIN index) live in migration
    # 0002 only; see forager.products.search.
    # (updated_at, id): the product list's order, read from the index alone (migration 0010).
    __table_args__ = (Index("ix_products_updated_at", "updated_at", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    domain_id: Mapped[int] = mapped_column(ForeignKey("domains.id", ondelete="CASCADE"), index=True)
    crawl_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="SET NULL")
    )
    url: Mapped[str] = mapped_column(Text)
    url_hash: Mapped[str] = mapped_column(String(64), unique=True)
    product_name: Mapped[str] = mapped_column(String(512), index=True)
    description: Mapped[str | None] = mapped_column(Text)
    price: Mapped[Decimal | None] = mapped_column(Money, index=True)
    currency: Mapped[str | None] = mapped_column(String(3))
    original_price: Mapped[Decimal | None] = mapped_column(Money)
    availability: Mapped[str | None] = mapped_column(String(255), index=True)
    is_available: Mapped[bool | None] = mapped_column(Boolean)
    rating: Mapped[Decimal | None] = mapped_column(Money)
    review_count: Mapped[int | None] = mapped_column(Integer)
    brand: Mapped[str | None] = mapped_column(String(255), index=True)
    category: Mapped[str | None] = mapped_column(String(512), index=True)
    sku: Mapped[str | None] = mapped_column(String(100))
    asin: Mapped[str | None] = mapped_column(String(20), index=True)
    parser_name: Mapped[str] = mapped_column(String(100))
    parser_version: Mapped[str] = mapped_column(String(50))
    content_hash: Mapped[str] = mapped_column(String(64))
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", JsonDoc)
    # Data quality of the latest parse (migration 0005): field -> 0..1, and the validation
    # rules the record breaks (kept, never dropped or "fixed"; see forager.parse.quality).
    field_confidence: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    quality_issues: Mapped[list[Any] | None] = mapped_column(JsonDoc)
    last_crawled_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    images: Mapped[list[ProductImage]] = relationship(
        order_by="ProductImage.position", cascade="all, delete-orphan", lazy="raise"
    )


class ProductImage(Base):
    """One image URL of a product and, on domains with ``download_images``, its stored copy.

    The stored bytes are keyed by their SHA-256 (``image_path`` = ``images/ab/<sha256>.<ext>``),
    so products sharing an image share one object. Download state (migration 0019): not yet
    tried while ``fetched_at`` is null; ``fetch_after`` is both the lease of the worker
    downloading it and the back-off after a failure that may pass; ``error`` says why the last
    try failed (kept with ``fetched_at`` set when it will not be tried again).
    """

    __tablename__ = "product_images"
    __table_args__ = (
        # The image downloader's look-up: images not yet done, oldest first.
        Index(
            "ix_product_images_due",
            "id",
            postgresql_where=text("fetched_at IS NULL"),
            sqlite_where=text("fetched_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    product_id: Mapped[int] = mapped_column(
        ForeignKey("products.id", ondelete="CASCADE"), index=True
    )
    image_url: Mapped[str] = mapped_column(Text)
    image_path: Mapped[str | None] = mapped_column(String(512))
    alt_text: Mapped[str | None] = mapped_column(String(512))
    image_type: Mapped[str] = mapped_column(String(50), default="gallery")
    position: Mapped[int] = mapped_column(Integer, default=0)
    width: Mapped[int | None] = mapped_column(Integer)
    height: Mapped[int | None] = mapped_column(Integer)
    file_size: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    content_hash: Mapped[str | None] = mapped_column(String(64), index=True)
    content_type: Mapped[str | None] = mapped_column(String(50))
    fetched_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    fetch_after: Mapped[datetime | None] = mapped_column(UTCDateTime)
    fetch_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(Text)


# A tag: lowercase letters, digits and - _ . : (safe in a query string and a CSV cell).
TAG_PATTERN = r"^[a-z0-9][a-z0-9_.:-]{0,49}(?![\s\S])"


class ProductTag(Base):
    """A tag of a product URL (migration 0021): keyed by the URL's hash, so a URL submitted with
    tags has them before its product exists, and its product has them when it appears."""

    __tablename__ = "product_tags"
    __table_args__ = (Index("ix_product_tags_tag", "tag", "url_hash"),)

    url_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    tag: Mapped[str] = mapped_column(String(50), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class PriceHistory(Base):
    """A row each time a product's price, list price or availability changes."""

    __tablename__ = "price_history"
    __table_args__ = (Index("ix_price_history_product_time", "product_id", "recorded_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    product_id: Mapped[int] = mapped_column(ForeignKey("products.id", ondelete="CASCADE"))
    crawl_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="SET NULL")
    )
    price: Mapped[Decimal | None] = mapped_column(Money)
    original_price: Mapped[Decimal | None] = mapped_column(Money)
    currency: Mapped[str | None] = mapped_column(String(3))
    availability: Mapped[str | None] = mapped_column(String(255))
    is_available: Mapped[bool | None] = mapped_column(Boolean)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


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
    breaker_state: Mapped[str] = mapped_column(String(10), default="closed")
    breaker_failures: Mapped[int] = mapped_column(Integer, default=0)
    breaker_successes: Mapped[int] = mapped_column(Integer, default=0)
    breaker_opened_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Breaker statistics (issue 15, the seed's CircuitBreaker): every recorded outcome and when
    # the state last changed; ``forager.fetch.breakers`` writes them. No rejection count: an
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


class Event(Base):
    """The audit log: one row per state change of any entity (DESIGN.md decision 5)."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_entity", "entity_type", "entity_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    entity_type: Mapped[str] = mapped_column(String(30))
    entity_id: Mapped[str] = mapped_column(String(64))
    event: Mapped[str] = mapped_column(String(50), index=True)
    details: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    # The API key's name, or "cli", behind the event; NULL for workers (migration 0010).
    actor: Mapped[str | None] = mapped_column(String(100))


class ApiKey(Base):
    """An API key: only its SHA-256 is stored; ``key_prefix`` identifies it in lists."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), index=True)
    role: Mapped[str] = mapped_column(String(10))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_prefix: Mapped[str] = mapped_column(String(8))
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Worker(Base):
    """A worker process as last seen: written on start and by every heartbeat."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))  # worker | serve | crawl
    concurrency: Mapped[int] = mapped_column(Integer)
    in_flight: Mapped[int] = mapped_column(Integer, default=0)
    processed: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Resources of the process tree at the last heartbeat (issue 15), and whether it stopped
    # to recycle itself (past FORAGER_WORKER_MEMORY_LIMIT_MB or _MAX_LIFETIME_HOURS).
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    cpu_percent: Mapped[float | None] = mapped_column(Float)
    recycled: Mapped[bool | None] = mapped_column(Boolean)


class Agent(Timestamped, Base):
    """A home-network agent (seed 000 ``LocalWorker``): dials in over WebSocket, only fetches."""

    __tablename__ = "agents"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # SHA-256 of the token (DESIGN.md decision 6); the token itself is shown once, never stored.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    token_prefix: Mapped[str] = mapped_column(String(12))
    isp_name: Mapped[str | None] = mapped_column(String(100))
    external_ip: Mapped[str | None] = mapped_column(String(45))
    status: Mapped[str] = mapped_column(String(20), default="disconnected", index=True)
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    tasks_completed_count: Mapped[int] = mapped_column(Integer, default=0)
    tasks_failed_count: Mapped[int] = mapped_column(Integer, default=0)
    agent_version: Mapped[str | None] = mapped_column(String(50))
    blocked_reason: Mapped[str | None] = mapped_column(String(500))
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


# -- missions (issue 16, seed 003): remote worker services, writers, missions, scraped ads ---
# Seed 003's ``workers`` are ``worker_services`` (DESIGN.md decision 9); its ``mission_logs``
# are rows of ``events`` (entity_type ``mission`` / ``worker_service``, decision 5). Statuses
# are strings checked by constraints (no native enums: one schema for SQLite and PostgreSQL).
# Proxies gain ``name``, ``in_use_by_worker_id`` and the two §3.4 indexes (see ``Proxy``).

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


# -- Task counters and dashboard logouts (migration 0010) ------------------------------------


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


class DashboardLogout(Base):
    """A logged-out dashboard session (its nonce), refused until the session would expire."""

    __tablename__ = "dashboard_logouts"

    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


# -- Live monitors (issue 15, migration 0013) -------------------------------------------------


class Monitor(Timestamped, Base):
    """One URL watched continuously; its counters and freshness survive restarts and takeovers.

    ``lease_owner`` / ``lease_expires_at`` spread monitors over processes (compare-and-set);
    the breaker columns follow ``forager.fetch.breakers`` like domains and proxies do.
    """

    __tablename__ = "monitors"
    __table_args__ = (
        CheckConstraint(
            "fetcher IN ('http', 'impersonate', 'browser')", name="ck_monitors_fetcher"
        ),
        CheckConstraint(
            "status IN ('active', 'stale', 'stopped', 'error', 'paused')",
            name="ck_monitors_status",
        ),
        CheckConstraint(
            "health_status IN ('healthy', 'degraded', 'failing')", name="ck_monitors_health"
        ),
        CheckConstraint(
            "min_interval_seconds <= interval_seconds AND interval_seconds <= max_interval_seconds",
            name="ck_monitors_interval_bounds",
        ),
        Index("idx_monitors_enabled_lease", "enabled", "lease_expires_at"),
        Index("idx_monitors_status", "status"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str | None] = mapped_column(String(100))
    url: Mapped[str] = mapped_column(String(2048))
    fetcher: Mapped[str] = mapped_column(String(20), default="http")
    # Either a registered parser or a selector map ({field: selector}, css or json).
    parser_name: Mapped[str | None] = mapped_column(String(100))
    selector_type: Mapped[str | None] = mapped_column(String(10))
    selectors: Mapped[dict[str, str] | None] = mapped_column(JsonDoc)
    # State detection: a field whose value is the monitor's state (live / ended, in stock /
    # sold out); a change of it is an event, and reaching one of end_states stops the monitor.
    state_field: Mapped[str | None] = mapped_column(String(64))
    end_states: Mapped[list[str] | None] = mapped_column(JsonDoc)
    last_state: Mapped[str | None] = mapped_column(String(200))
    interval_seconds: Mapped[float] = mapped_column(Float, default=2.5)
    min_interval_seconds: Mapped[float] = mapped_column(Float)
    max_interval_seconds: Mapped[float] = mapped_column(Float)
    current_interval_seconds: Mapped[float] = mapped_column(Float)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(10), default="stopped")
    health_status: Mapped[str] = mapped_column(String(10), default="healthy")
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    next_poll_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The current run (ScraperContext): a new id and start time on every (re)start.
    scraper_id: Mapped[str | None] = mapped_column(String(36))
    run_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    total_polls: Mapped[int] = mapped_column(BigInteger, default=0)
    total_updates: Mapped[int] = mapped_column(BigInteger, default=0)
    total_changes: Mapped[int] = mapped_column(BigInteger, default=0)
    total_errors: Mapped[int] = mapped_column(BigInteger, default=0)
    consecutive_errors: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    breaker_state: Mapped[str] = mapped_column(String(10), default="closed")
    breaker_failures: Mapped[int] = mapped_column(Integer, default=0)
    breaker_successes: Mapped[int] = mapped_column(Integer, default=0)
    breaker_opened_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    breaker_rejections: Mapped[int] = mapped_column(BigInteger, default=0)
    breaker_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    content_hash: Mapped[str | None] = mapped_column(String(64))
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_change_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_latency_ms: Mapped[int | None] = mapped_column(Integer)
    # Successful polls by latency (forager.monitors.window.LATENCY_BUCKETS, then +Inf), kept
    # by the one process holding the lease; /metrics makes a histogram of them.
    latency_buckets: Mapped[list[int] | None] = mapped_column(JsonDoc)
    latency_sum_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    # Snapshots dropped unwritten from a full result queue (seed MAX_QUEUE_SIZE; issue 15).
    dropped_snapshots: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # The last minute or two of successful polls (forager.monitors.window), for /health.
    poll_windows: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    cpu_percent: Mapped[float | None] = mapped_column(Float)


class MonitorSnapshot(Base):
    """One observed state of a monitor's data: written only when it differs from the last."""

    __tablename__ = "monitor_snapshots"
    __table_args__ = (Index("idx_monitor_snapshots_monitor", "monitor_id", "observed_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    monitor_id: Mapped[int] = mapped_column(ForeignKey("monitors.id", ondelete="CASCADE"))
    data: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    content_hash: Mapped[str] = mapped_column(String(64))
    observed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    scraper_id: Mapped[str | None] = mapped_column(String(36))
    update_latency_ms: Mapped[int | None] = mapped_column(Integer)
    data_source: Mapped[str] = mapped_column(String(50), default="scraper")


class ScraperHealthLog(Base):
    """A periodic health sample of one monitor's run (seed: scraper_health_log)."""

    __tablename__ = "scraper_health_log"
    __table_args__ = (
        Index("idx_health_scraper_timestamp", "scraper_id", "timestamp"),
        Index("idx_health_monitor_timestamp", "monitor_id", "timestamp"),
        Index("idx_health_status", "health_status", "timestamp"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    scraper_id: Mapped[str] = mapped_column(String(36))
    monitor_id: Mapped[int | None] = mapped_column(BigId)
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    health_status: Mapped[str] = mapped_column(String(20))
    error_count: Mapped[int] = mapped_column(Integer, default=0)
    memory_mb: Mapped[float | None] = mapped_column(Float)
    cpu_percent: Mapped[float | None] = mapped_column(Float)
    update_latency_ms: Mapped[int | None] = mapped_column(Integer)
    polling_interval_seconds: Mapped[float | None] = mapped_column(Float)
    uptime_seconds: Mapped[int | None] = mapped_column(Integer)
    last_update_age_seconds: Mapped[int | None] = mapped_column(Integer)
    # start | sample | restart | stop (why the row was written)
    event: Mapped[str | None] = mapped_column(String(20))


class ScraperError(Base):
    """One error of a monitor's run, with its resolution once it recovers (seed: scraper_errors)."""

    __tablename__ = "scraper_errors"
    __table_args__ = (
        CheckConstraint(
            "category IN ('network', 'parsing', 'browser', 'database', 'auth')",
            name="ck_scraper_errors_category",
        ),
        CheckConstraint(
            "resolution_method IS NULL OR resolution_method IN "
            "('auto_retry', 'circuit_breaker', 'manual', 'restart')",
            name="ck_scraper_errors_resolution",
        ),
        Index("idx_errors_scraper_timestamp", "scraper_id", "timestamp"),
        Index("idx_errors_monitor", "monitor_id", "resolved"),
        Index("idx_errors_type", "error_type", "timestamp"),
        Index("idx_errors_unresolved", "resolved", "timestamp"),
        Index("idx_errors_timestamp", "timestamp"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    scraper_id: Mapped[str] = mapped_column(String(36))
    monitor_id: Mapped[int | None] = mapped_column(BigId)
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    error_type: Mapped[str] = mapped_column(String(50))  # Forager's closed error types
    category: Mapped[str] = mapped_column(String(20))  # the seed's: network/parsing/browser/…
    error_message: Mapped[str | None] = mapped_column(Text)
    stack_trace: Mapped[str | None] = mapped_column(Text)
    url: Mapped[str | None] = mapped_column(String(2048))
    operation: Mapped[str | None] = mapped_column(String(100))
    retry_attempt: Mapped[int] = mapped_column(Integer, default=0)
    resolved: Mapped[bool] = mapped_column(Boolean, default=False)
    resolution_time: Mapped[datetime | None] = mapped_column(UTCDateTime)
    resolution_method: Mapped[str | None] = mapped_column(String(50))


class AlertRule(Timestamped, Base):
    """A subscription (issue 17): which event, on which products or entities, sent where.

    The target (a webhook URL or an Apprise URL) and the webhook's signing secret are stored
    encrypted (``forager.crypto.SecretBox``); ``target_display`` is the masked form shown back.
    """

    __tablename__ = "alert_rules"
    __table_args__ = (
        CheckConstraint("channel IN ('webhook', 'apprise')", name="ck_alert_rules_channel"),
        Index("ix_alert_rules_kind_enabled", "kind", "enabled"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(30))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # price_drop / price_rise: by at least this many percent; price_below / price_above: this.
    percent: Mapped[float | None] = mapped_column(Float)
    threshold: Mapped[Decimal | None] = mapped_column(Money)
    # Noise filter for price rules: a smaller move than either is not a change.
    min_change_abs: Mapped[Decimal | None] = mapped_column(Money)
    min_change_pct: Mapped[float | None] = mapped_column(Float)
    fire_on_first: Mapped[bool] = mapped_column(Boolean, default=False)
    # Scope (all NULL: everything): one product, a domain, a batch of tasks, a tag.
    product_id: Mapped[int | None] = mapped_column(
        ForeignKey("products.id", ondelete="CASCADE"), index=True
    )
    domain_id: Mapped[int | None] = mapped_column(
        ForeignKey("domains.id", ondelete="CASCADE"), index=True
    )
    batch_name: Mapped[str | None] = mapped_column(String(255))
    tag: Mapped[str | None] = mapped_column(String(50))  # products with this tag (0021)
    channel: Mapped[str] = mapped_column(String(10), default="webhook")
    target_enc: Mapped[str] = mapped_column(Text)
    target_display: Mapped[str] = mapped_column(String(300))
    secret_enc: Mapped[str | None] = mapped_column(Text)


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


class AlertDelivery(Base):
    """The outbox: one notification of one rule, written in the transaction of its change and
    sent (and retried) by the delivery loop; ``next_attempt_at`` doubles as its lease."""

    __tablename__ = "alert_deliveries"
    __table_args__ = (
        CheckConstraint(
            "status IN ('pending', 'delivered', 'failed')", name="ck_alert_deliveries_status"
        ),
        Index("ix_alert_deliveries_due", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    rule_id: Mapped[int] = mapped_column(
        ForeignKey("alert_rules.id", ondelete="CASCADE"), index=True
    )
    event: Mapped[str] = mapped_column(String(30))
    subject_type: Mapped[str] = mapped_column(String(30))
    subject_id: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    status: Mapped[str] = mapped_column(String(10), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class AlertAttempt(Base):
    """One try of a delivery: the receiver's status code, or the error."""

    __tablename__ = "alert_attempts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    delivery_id: Mapped[int] = mapped_column(
        ForeignKey("alert_deliveries.id", ondelete="CASCADE"), index=True
    )
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    duration_ms: Mapped[int] = mapped_column(Integer)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)


class SelectorParser(Base):
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


# -- Items: records that are not products (issue 17, migration 0020) ------------------------


class Item(Base):
    """The current data of one item: a non-product record (an ad, a listing, a snapshot) a
    parser returned, identified by ``(domain, kind, key)`` so recrawls update it."""

    __tablename__ = "items"
    __table_args__ = (
        UniqueConstraint("domain_id", "kind", "item_key", name="uq_items_domain_kind_key"),
        # The item list's order (newest change first), read from the index alone.
        Index("ix_items_changed_at", "changed_at", "id"),
        Index("ix_items_kind_changed_at", "kind", "changed_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    domain_id: Mapped[int] = mapped_column(ForeignKey("domains.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(50))
    item_key: Mapped[str] = mapped_column(String(500))
    data: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    content_hash: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer, default=1)
    # Every text value of ``data``, lower-cased, for the list's text search.
    search_text: Mapped[str] = mapped_column(Text, default="")
    # Provenance of the latest observation: the task and its page URL (the stored page it read
    # is the task's; no key here, so page retention never leaves one dangling), the parser.
    crawl_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="SET NULL"), index=True
    )
    url: Mapped[str | None] = mapped_column(Text)
    parser_name: Mapped[str] = mapped_column(String(100))
    parser_version: Mapped[str] = mapped_column(String(50))
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    changed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ItemVersion(Base):
    """One version of an item's data: written only when its canonical JSON changed."""

    __tablename__ = "item_versions"
    __table_args__ = (UniqueConstraint("item_id", "version", name="uq_item_versions_version"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    data: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    content_hash: Mapped[str] = mapped_column(String(64))
    crawl_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="SET NULL")
    )
    url: Mapped[str | None] = mapped_column(Text)
    parser_name: Mapped[str] = mapped_column(String(100))
    parser_version: Mapped[str] = mapped_column(String(50))
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
