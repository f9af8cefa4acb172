"""Request and response bodies of the API (Create / Public shapes per resource)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from forager.api.wire import CRAWL_URL, MAX_JSON_ID, JsonBody, Shape, Timestamp, choice_of
from forager.errors import InvalidURL
from forager.parse.registry import parser_names
from forager.products.tags import MAX_TAGS, TAG
from forager.queue.submit import SubmitSpec
from forager.queue.urls import normalize_url


def _why_not_crawlable(url: str) -> str | None:
    """The normalizer's own reason for refusing ``url``, when it has one."""
    try:
        normalize_url(url)
    except InvalidURL as exc:
        return exc.message
    return None


CrawlURL = Annotated[
    str,
    Shape(
        CRAWL_URL,
        "an http(s) URL: scheme, host name, optional port and path",
        2047,
        explain=_why_not_crawlable,
    ),
]
Tag = Annotated[
    str,
    Shape(
        TAG,
        "a tag: 1-50 lowercase letters, digits, -, _, . or :, starting with a letter or digit",
        50,
    ),
]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
VersionText = Annotated[str, Shape(r"^[A-Za-z0-9_.-]+(?![\s\S])", "a version like 2.1", 50)]

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int = Field(description="Rows matching the filters, all pages together.")
    limit: int
    offset: int
    total_exact: bool = Field(
        True,
        description=(
            "False only for a product search (q) that more than 10,000 products match: total "
            "is then 10,000, a lower bound (as search engines report broad matches), and the "
            "pages go on past it."
        ),
    )


class TaskOptions(JsonBody):
    """How to crawl; shared by single and batch submission."""

    model_config = ConfigDict(extra="forbid")

    priority: int = Field(5, ge=1, le=10, description="1 is the highest priority, 10 the lowest.")
    is_recurring: bool = Field(False, description="Recrawl every crawl_frequency_seconds.")
    crawl_frequency_seconds: int | None = Field(
        None,
        ge=60,
        le=31_536_000,
        description="Recrawl period (at most a year); default: the domain's.",
    )
    max_retries: int | None = Field(None, ge=0, le=100, description="Default: FORAGER_MAX_RETRIES.")
    scheduled_at: Timestamp | None = Field(None, description="Not before this time.")
    parser_name: str | None = Field(
        None,
        description="Parser to use instead of the domain's.",
        json_schema_extra=choice_of(parser_names),
    )
    batch_name: str | None = Field(None, max_length=255)
    adaptive_recrawl: bool = Field(
        False,
        description="Makes the task recurring with an adaptive frequency: a price or "
        "availability change halves it, an unchanged crawl makes it 1.5 times longer, within "
        "the min / max below; a failed, blocked or partial crawl changes nothing "
        "(docs/ALERTS.md).",
    )
    min_crawl_frequency_seconds: int | None = Field(
        None,
        ge=60,
        le=31_536_000,
        description="Shortest adaptive frequency (only with adaptive_recrawl); default a "
        "quarter of crawl_frequency_seconds (at least 60).",
    )
    max_crawl_frequency_seconds: int | None = Field(
        None,
        ge=60,
        le=31_536_000,
        description="Longest adaptive frequency (only with adaptive_recrawl; below the minimum: "
        "raised to it); default 7 times crawl_frequency_seconds.",
    )
    tags: Tags = Field(
        default_factory=list,
        description="Tags of the URL's product (added to those it has; a duplicate URL gets "
        "them too): filter products and scope alert rules by them.",
    )

    @field_validator("parser_name")
    @classmethod
    def _known_parser(cls, name: str | None) -> str | None:
        if name is not None and name not in parser_names():
            raise ValueError(f"unknown parser {name!r} (known: {', '.join(parser_names())})")
        return name

    def spec(self, url: str, created_by: str) -> SubmitSpec:
        """The submit path's request for ``url`` with these options (API and ``forager
        submit`` alike)."""
        return SubmitSpec(
            url=url,
            priority=self.priority,
            is_recurring=self.is_recurring,
            crawl_frequency_seconds=self.crawl_frequency_seconds,
            max_retries=self.max_retries,
            scheduled_at=self.scheduled_at,
            parser_name=self.parser_name,
            batch_name=self.batch_name,
            created_by=created_by,
            adaptive_recrawl=self.adaptive_recrawl,
            min_crawl_frequency_seconds=self.min_crawl_frequency_seconds,
            max_crawl_frequency_seconds=self.max_crawl_frequency_seconds,
            tags=tuple(dict.fromkeys(self.tags)),
        )


class TaskCreate(TaskOptions):
    url: CrawlURL = Field(examples=["https://www.amazon.com.br/dp/B0ABC12345"])


class TaskBatchCreate(TaskOptions):
    urls: list[str] = Field(min_length=1, max_length=10_000)


class TaskPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    url: str
    url_hash: str
    domain_id: int
    status: str
    priority: int
    scheduled_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    retry_count: int
    max_retries: int
    error_type: str | None
    error_message: str | None
    is_recurring: bool
    crawl_frequency_seconds: int = Field(
        description="The recrawl period set (an adaptive task's starting frequency)."
    )
    next_crawl_at: datetime | None
    recrawl_count: int
    adaptive_recrawl: bool
    min_crawl_frequency_seconds: int | None = Field(description="Adaptive tasks' bounds.")
    max_crawl_frequency_seconds: int | None
    current_crawl_frequency_seconds: int | None = Field(
        description="An adaptive task's frequency now (null when not adaptive)."
    )
    crawl_frequency_reason: str | None = Field(
        description='Why the adaptive frequency is what it is, e.g. "price changed → 6 h", '
        '"unchanged 3 times → 3.4 d".'
    )
    unchanged_crawls: int = Field(description="Adaptive: completed crawls in a row unchanged.")
    html_path: str | None
    http_status_code: int | None
    response_time_ms: int | None
    proxy_id: int | None
    parser_name: str | None
    batch_name: str | None
    created_by: str
    lease_owner: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime


class TaskRestart(JsonBody):
    """Options of a restart (seed 004); all optional."""

    model_config = ConfigDict(extra="forbid")

    reset_retry_count: bool = Field(True, description="Start again with retry_count 0.")
    priority: int | None = Field(None, ge=1, le=10, description="New priority (1 highest).")
    scheduled_at: Timestamp | None = Field(None, description="Not before this time.")


class TaskRecrawl(JsonBody):
    """New recrawl settings; fields left out keep their value (adaptive_recrawl true makes the
    task recurring). The adaptive frequency starts over from crawl_frequency_seconds; a finished
    recurring task's next crawl follows it."""

    model_config = ConfigDict(extra="forbid")

    is_recurring: bool | None = None
    crawl_frequency_seconds: int | None = Field(None, ge=60, le=31_536_000)
    adaptive_recrawl: bool | None = None
    min_crawl_frequency_seconds: int | None = Field(
        None, ge=60, le=31_536_000, description="null: back to the default bound."
    )
    max_crawl_frequency_seconds: int | None = Field(
        None, ge=60, le=31_536_000, description="null: back to the default bound."
    )


class TaskRestartParsing(JsonBody):
    model_config = ConfigDict(extra="forbid")

    reset_retry_count: bool = Field(True, description="Start again with retry_count 0.")


class TaskPriority(JsonBody):
    model_config = ConfigDict(extra="forbid")

    priority: int = Field(ge=1, le=10, description="1 is the highest priority, 10 the lowest.")


class RestartFailed(JsonBody):
    """Which failed tasks to restart in bulk (seed 004 restart-failed)."""

    model_config = ConfigDict(extra="forbid")

    domain_id: int | None = Field(None, ge=1, le=MAX_JSON_ID)
    failed_after: Timestamp | None = Field(None, description="Only tasks failed since.")
    limit: int = Field(1000, ge=1, le=10_000)


class RestartParsing(JsonBody):
    """Which stored pages to parse again in bulk, e.g. after a parser version bump."""

    model_config = ConfigDict(extra="forbid")

    domain_id: int | None = Field(None, ge=1, le=MAX_JSON_ID)
    domain: str | None = Field(
        None, min_length=1, max_length=255, description="Only this domain (its domain_name)."
    )
    outdated: bool = Field(
        False,
        description="Only pages whose product (on a page without one: whose items) was read "
        "by another version than the parser's current one.",
    )
    parser_version_below: VersionText | None = Field(
        None,
        description="Only pages whose product (or items) a parser version older than this read.",
    )
    parse_failures: bool = Field(
        False,
        description="Also tasks whose parse failed (error_type parse); alone, only those.",
    )
    limit: int = Field(1000, ge=1, le=10_000)


class RestartedTasks(BaseModel):
    restarted: int
    task_ids: list[int]


class StatusStats(BaseModel):
    status: str
    count: int
    avg_duration_seconds: float | None = Field(
        description="Mean of completed_at - started_at where both are set."
    )


class TaskStats(BaseModel):
    since: datetime
    statuses: list[StatusStats]


class SubmitResult(BaseModel):
    input_url: str
    result: Literal["created", "duplicate", "invalid"]
    task_id: int | None = None
    url: str | None = None
    status: str | None = None
    error: str | None = None


class TaskSubmitted(BaseModel):
    result: Literal["created", "duplicate"]
    task: TaskPublic


class BatchSubmitted(BaseModel):
    created: int
    duplicate: int
    invalid: int
    results: list[SubmitResult]


class AttemptPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    phase: str
    outcome: str
    worker_id: str | None
    proxy_id: int | None
    started_at: datetime
    finished_at: datetime | None
    status_code: int | None
    response_time_ms: int | None
    bytes_received: int | None
    final_url: str | None
    page_path: str | None
    error_type: str | None
    error_message: str | None


class EventPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    event: str
    details: dict[str, Any] | None
    actor: str | None = Field(
        None, description="The API key (its name) or cli behind the event; null for workers."
    )
    created_at: datetime


class TaskDetail(TaskPublic):
    attempts: list[AttemptPublic] = Field(description="The newest attempts, oldest first.")
    attempts_total: int = Field(description="All attempts; page with /api/tasks/{id}/attempts.")
    events: list[EventPublic] = Field(description="The newest events, oldest first.")
    events_total: int = Field(description="All events; page with /api/tasks/{id}/events.")


class ProductPublic(BaseModel):
    """The product record of DESIGN.md; prices are decimal strings."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    domain_id: int
    url: str
    product_name: str
    description: str | None
    price: Decimal | None
    currency: str | None
    original_price: Decimal | None
    rating: Decimal | None
    review_count: int | None
    availability: str | None
    is_available: bool | None
    brand: str | None
    category: str | None
    sku: str | None
    asin: str | None
    image_urls: list[str]
    parser_name: str
    parser_version: str
    field_confidence: dict[str, float] | None = Field(
        None, description="How sure the parser is of each filled field (0..1)."
    )
    quality_issues: list[str] | None = Field(
        None, description="Validation rules the record breaks (kept as extracted)."
    )
    content_hash: str
    last_crawled_at: datetime
    created_at: datetime
    updated_at: datetime
    tags: list[str] = Field(default_factory=list, description="The product URL's tags, sorted.")


class ProductUpdate(JsonBody):
    model_config = ConfigDict(extra="forbid")

    tags: Tags = Field(description="The product's tags from now on (the whole list).")


class ProductTagChange(JsonBody):
    """Tags added to and removed from many products at once."""

    model_config = ConfigDict(extra="forbid")

    product_ids: list[Annotated[int, Field(ge=1, le=MAX_JSON_ID)]] = Field(
        min_length=1, max_length=10_000
    )
    add: Tags = Field(default_factory=list)
    remove: Tags = Field(default_factory=list)


class ProductsTagged(BaseModel):
    updated: int = Field(description="Products found and changed.")
    product_ids: list[int]


class ProductImagePublic(BaseModel):
    """One image of a product and, on a domain with ``download_images``, its stored copy."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    image_url: str = Field(description="Where the shop serves it (as the parser found it).")
    position: int = Field(description="0 is the main image.")
    image_type: str = Field(description="primary (the main image) or gallery.")
    alt_text: str | None = Field(
        None, description="The image's alternative text; null: the parser does not read it."
    )
    stored: bool = Field(description="Forager holds a copy (served by content_url).")
    content_url: str | None = Field(
        None, description="This server's URL of the stored copy (authenticated like the API)."
    )
    content_hash: str | None = Field(None, description="SHA-256 of the stored bytes (hex).")
    content_type: str | None = Field(
        None, description="The type read from the bytes (image/png, image/jpeg, …)."
    )
    width: int | None = Field(None, description="Pixels, read from the file.")
    height: int | None = Field(None, description="Pixels, read from the file.")
    file_size: int | None = Field(None, description="Bytes stored.")
    fetched_at: datetime | None = Field(
        None, description="When it was stored, or its last failed try when not tried again."
    )
    fetch_attempts: int = Field(0, description="Downloads tried.")
    error: str | None = Field(
        None, description="Why the last try failed (not an image, too large, HTTP error …)."
    )


class PricePoint(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    price: Decimal | None
    original_price: Decimal | None
    currency: str | None
    availability: str | None
    is_available: bool | None
    recorded_at: datetime


class ProductDetail(ProductPublic):
    price_history: list[PricePoint] = Field(description="The newest price points, oldest first.")
    price_history_total: int = Field(
        description="All price points; page with /api/products/{id}/price-history."
    )


class CrawlWorkerSeen(BaseModel):
    """A crawl worker process seen recently, by its process name; not a mission's worker
    service (``/api/worker-services``, whose numeric ids ``worker_id`` filters name)."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: str
    concurrency: int
    in_flight: int
    processed: int
    started_at: datetime
    last_seen_at: datetime
    memory_bytes: int | None = Field(None, description="RSS of its process tree.")
    cpu_percent: float | None = None


class BreakerSeen(BaseModel):
    """A circuit breaker that is not closed (issue 5)."""

    model_config = ConfigDict(from_attributes=True)

    kind: Literal["domain", "proxy"]
    entity_id: int
    name: str
    state: Literal["open", "half_open"]
    failure_count: int
    success_count: int
    opened_at: datetime | None


class ScraperSeen(BaseModel):
    """One running monitor, as the seed's ``ScraperContext.to_dict`` (issue 15)."""

    scraper_id: str | None = None
    match_id: str = Field(description="The monitor's id (the seed's match).")
    monitor_id: int
    url: str
    start_time: datetime
    last_update: datetime | None = Field(None, description="The last successful poll.")
    uptime_seconds: float
    error_count: int = Field(description="Consecutive errors.")
    total_errors: int
    total_updates: int
    health_status: Literal["healthy", "degraded", "failing"]
    memory_mb: float
    cpu_percent: float
    polling_interval: float
    dropped_snapshots: int = Field(
        description="Changes dropped unwritten from a full result queue (all runs)."
    )


class CircuitBreakerSeen(BaseModel):
    """A breaker of a domain, a proxy or a monitor (every one, closed ones too), with the
    seed's statistics."""

    kind: Literal["domain", "proxy", "monitor"]
    entity_id: int
    name: str
    state: Literal["closed", "open", "half_open"]
    failure_count: int
    success_count: int
    opened_at: datetime | None = None
    total_calls: int = Field(description="Outcomes recorded (and, for a monitor, refusals).")
    total_successes: int
    total_failures: int
    total_rejections: int | None = Field(
        None,
        description="Polls refused while open: monitors only (an open domain's or proxy's "
        "work is skipped by the claim, never offered and refused).",
    )
    last_state_change: datetime | None = None


class HealthResources(BaseModel):
    total_memory_mb: float
    average_memory_mb: float
    peak_memory_mb: float
    total_cpu_percent: float
    dropped_snapshots: int = Field(
        description="Changes of enabled monitors dropped unwritten from a full result queue "
        "(FORAGER_MONITOR_MAX_QUEUE_SIZE / _MB), oldest first, never the latest."
    )


class HealthErrors(BaseModel):
    last_minute: int = Field(description="Monitor errors in the last minute.")
    last_hour: int
    circuit_breakers: list[CircuitBreakerSeen]


class HealthPerformance(BaseModel):
    """Recorded successful polls of every enabled monitor over the last one to two minutes."""

    average_latency_ms: float
    p95_latency_ms: float = Field(
        description="Interpolated within its latency histogram bucket (as Prometheus does)."
    )
    updates_per_minute: float = Field(description="Successful polls per minute, recorded.")


class PartHealth(BaseModel):
    status: Literal["healthy", "degraded", "down"]
    detail: str | None = None


class Health(BaseModel):
    """Anonymous callers get ``status``, ``timestamp`` and ``opt_outs``; the rest needs a key."""

    status: Literal["healthy", "degraded", "down"]
    timestamp: datetime = Field(description="When the server answered (UTC).")
    opt_outs: list[str] = Field(
        default_factory=list,
        description="Settings in force that weaken safety, e.g. browser_no_sandbox.",
    )
    database: Literal["ok", "unreachable"] | None = Field(None, description="With an API key.")
    queue_depth: dict[str, int] | None = Field(None, description="Tasks by status.")
    due_tasks: int | None = Field(None, description="Pending tasks whose time has come.")
    workers: list[CrawlWorkerSeen] | None = Field(
        None, description="Worker processes seen recently."
    )
    circuit_breakers: list[BreakerSeen] | None = Field(
        None, description="Domain and proxy circuit breakers that are open or half-open."
    )
    detail: str | None = None
    # The seed's HealthStatus (issue 15), with an API key; status is the worse of the two parts.
    queue: PartHealth | None = Field(None, description="The crawl queue's own health.")
    monitors: PartHealth | None = Field(None, description="The live monitors' own health.")
    active_scraper_count: int | None = None
    total_matches_scraping: int | None = Field(None, description="Enabled monitors.")
    scrapers: list[ScraperSeen] | None = None
    resources: HealthResources | None = None
    errors: HealthErrors | None = None
    performance: HealthPerformance | None = None


class Stats(BaseModel):
    tasks_by_status: dict[str, int]
    products: int
    domains: dict[str, int] = Field(description="Domains by is_active (true/false).")
    proxies: dict[str, int] = Field(description="Proxies by is_active (true/false).")
    fetches_last_hour: dict[str, int] = Field(description="Fetch attempts by outcome.")
    errors_last_hour: dict[str, int] = Field(description="Attempts by error type.")
    workers: list[CrawlWorkerSeen]
