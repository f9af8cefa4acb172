"""Forager's settings: one pydantic-settings object from ``FORAGER_*`` variables and ``.env``."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from forager.errors import ConfigError


class Settings(BaseSettings):
    """Every knob Forager has. Frozen: read once at start-up, then shared."""

    model_config = SettingsConfigDict(
        env_prefix="FORAGER_", env_file=".env", extra="ignore", frozen=True
    )

    data_dir: Path = Field(
        Path("forager-data"),
        description="Directory for the SQLite file, the page store and generated secrets.",
    )
    database_url: str = Field(
        "",
        description="SQLAlchemy URL; empty means SQLite inside the data dir. "
        "Use postgresql+asyncpg://user@host/db to scale out.",
    )
    db_pool_size: int = Field(
        10,
        ge=1,
        le=1000,
        description="PostgreSQL connections each process keeps open (SQLAlchemy pool_size).",
    )
    db_max_overflow: int = Field(
        20, ge=0, le=1000, description="Extra PostgreSQL connections a process opens under load."
    )
    db_pool_timeout_seconds: float = Field(
        30.0, gt=0, description="How long a process waits for a free database connection."
    )
    page_store_dir: Path | None = Field(
        None, description="Where raw pages are stored (gzip); default <data_dir>/pages."
    )
    page_compression_level: int = Field(
        3,
        ge=1,
        le=9,
        description="gzip level of stored pages: 3 takes half the CPU of 6 on real pages "
        "(~600 KB) for ~11% more bytes; 9 the fewest bytes.",
    )
    page_store: str = Field(
        "",
        description="`s3://bucket/prefix` keeps raw pages in an S3-compatible store (the bucket "
        "must exist; it is checked at start-up); empty: the directory FORAGER_PAGE_STORE_DIR.",
    )
    s3_endpoint_url: str = Field(
        "",
        description="S3 endpoint, e.g. http://127.0.0.1:8333 for SeaweedFS or MinIO; empty: AWS "
        "(https://s3.<region>.amazonaws.com). Requests are path-style and SigV4-signed.",
    )
    s3_region: str = Field("us-east-1", min_length=1, description="Region the S3 requests sign.")
    s3_access_key_id: str = Field("", description="S3 access key id (with FORAGER_PAGE_STORE).")
    s3_secret_access_key: SecretStr | None = Field(
        None, description="S3 secret access key; never logged or returned by the API."
    )
    page_retention_keep_last: int = Field(
        0,
        ge=0,
        description="Retention: keep the newest N stored pages of each task (0: no count limit). "
        "With FORAGER_PAGE_RETENTION_DAYS too, a page goes only when both would drop it.",
    )
    page_retention_days: float = Field(
        0.0,
        ge=0,
        description="Retention: keep stored pages younger than this many days (0: no age limit). "
        "A task's latest page is never deleted.",
    )
    page_retention_interval_seconds: float = Field(
        3600.0,
        gt=0,
        description="How often the scheduler prunes pages past retention (when retention is on).",
    )
    s3_timeout_seconds: float = Field(
        30.0, gt=0, description="Timeout of one S3 request (connect, send the page, answer)."
    )
    # -- row retention (issue 35, forager.retention; docs/CONFIGURATION.md) --
    retention_interval_seconds: float = Field(
        3600.0,
        gt=0,
        description="How often the scheduler prunes rows past retention (the first run one "
        "interval after start).",
    )
    retention_batch_rows: int = Field(
        1000,
        ge=10,
        le=100_000,
        description="Rows deleted per transaction by row retention (short locks on PostgreSQL).",
    )
    event_retention_days: float = Field(
        90.0, ge=0, description="Audit events older than this are deleted (0: no age limit)."
    )
    event_retention_max_rows: int = Field(
        0, ge=0, description="Keep at most the newest N audit events (0: no count limit)."
    )
    attempt_retention_days: float = Field(
        30.0,
        ge=0,
        description="Crawl attempts older than this are deleted (0: no age limit); one that "
        "still points at a stored page waits for page retention.",
    )
    attempt_retention_max_rows: int = Field(
        0, ge=0, description="Keep at most the newest N crawl attempts (0: no count limit)."
    )
    price_history_retention_days: float = Field(
        30.0,
        ge=0,
        description="Price history rows older than this that repeat the row before them are "
        "deleted; a change of price, list price, currency or stock is never deleted (0: off).",
    )
    monitor_snapshot_retention_days: float = Field(
        90.0,
        ge=0,
        description="Monitor snapshots older than this are deleted (0: no age limit); a "
        "monitor's newest snapshot is never deleted.",
    )
    monitor_snapshot_keep_last: int = Field(
        1000, ge=0, description="Keep at most the newest N snapshots per monitor (0: no limit)."
    )
    alert_delivery_retention_days: float = Field(
        30.0,
        ge=0,
        description="Delivered and failed alert deliveries (and their attempts) older than "
        "this are deleted; pending ones never (0: off).",
    )
    feed_run_retention_days: float = Field(
        90.0,
        ge=0,
        description="Succeeded feed runs older than this are deleted from a feed's history; "
        "running and failed runs and each feed's newest run never (0: off).",
    )
    image_max_bytes: int = Field(
        5 * 1024 * 1024,
        ge=1024,
        description="Product images (domains with download_images): the largest image kept; "
        "a larger one is refused (`too_large`) while it downloads.",
    )
    image_max_pixels: int = Field(
        40_000_000,
        ge=1,
        description="Product images: the most pixels (width × height, read from the file's "
        "header) an image may have; more is refused without decoding it (decompression bombs).",
    )
    image_poll_seconds: float = Field(
        5.0, gt=0, description="How often each worker looks for product images to download."
    )
    image_concurrency: int = Field(
        2, ge=1, le=64, description="Product images each worker downloads at once."
    )
    image_max_attempts: int = Field(
        3,
        ge=1,
        le=20,
        description="Tries per product image when the failure may pass (network, 5xx, 429); "
        "an answer that is not an image, too large or a 4xx is not tried again.",
    )
    host: str = Field("127.0.0.1", description="Address `forager serve` binds.")
    port: int = Field(8000, ge=1, le=65535, description="Port `forager serve` binds.")
    serve_workers: int = Field(
        4, ge=0, le=1024, description="Concurrency of the worker pool built into `serve` (0: none)."
    )
    worker_concurrency: int = Field(
        8, ge=1, le=4096, description="Default concurrency of `forager worker`."
    )
    lease_seconds: float = Field(
        60.0, gt=0, description="How long a claimed task stays leased without a heartbeat."
    )
    dispatch: Literal["database", "celery"] = Field(
        "database",
        description="How claimed tasks reach workers: `database` (workers claim them) or "
        "`celery` (the relay claims them into an outbox and publishes their ids to RabbitMQ; "
        "`forager celery-worker` processes run them).",
    )
    celery_broker_url: SecretStr = Field(
        SecretStr("amqp://guest:guest@127.0.0.1:5672//"),
        description="RabbitMQ URL of Celery dispatch; never logged (it may hold a password).",
    )
    celery_queue_prefix: str = Field(
        "",
        max_length=100,
        pattern=r"^[A-Za-z0-9_.:-]*$",
        description="Prefix of the three queue names (`priority_queue`, `crawl_queue`, "
        "`parse_queue`), so several Forager installations can share one RabbitMQ vhost.",
    )
    celery_max_queued: int = Field(
        64,
        ge=1,
        le=100_000,
        description="Celery dispatch: most tasks claimed into RabbitMQ and not yet taken by a "
        "worker. A task waits there under its lease: keep it below what the Celery workers "
        "start within FORAGER_LEASE_SECONDS.",
    )
    heartbeat_seconds: float = Field(
        10.0, gt=0, description="How often a worker renews the leases of its in-flight tasks."
    )
    poll_seconds: float = Field(
        1.0, gt=0, description="How long an idle worker waits before looking for work again."
    )
    listen_notify: bool = Field(
        True,
        description=(
            "On PostgreSQL, idle workers LISTEN for new work (a submit, restart or due recrawl "
            "sends NOTIFY) and claim at once; polling stays the fallback. Off: they only poll."
        ),
    )
    scheduler_seconds: float = Field(
        5.0,
        gt=0,
        description="How often the scheduler reaps expired leases and requeues due recrawls.",
    )
    shutdown_seconds: float = Field(
        30.0, ge=0, description="On SIGTERM: how long in-flight tasks may run before release."
    )
    max_retries: int = Field(3, ge=0, le=100, description="Default retries per task.")
    retry_base_seconds: float = Field(
        60.0, ge=0, description="First retry delay; doubles per retry, with ±50 % jitter."
    )
    retry_max_seconds: float = Field(3600.0, ge=0, description="Upper bound of a retry delay.")
    connect_timeout_seconds: float = Field(10.0, gt=0, description="TCP/TLS connect timeout.")
    fetch_timeout_seconds: float = Field(
        30.0, gt=0, description="Timeout for the whole fetch (all redirects, whole body)."
    )
    max_redirects: int = Field(5, ge=0, le=30, description="Redirects followed per fetch.")
    fetcher_probe_seconds: float = Field(
        3600.0,
        ge=1,
        le=30 * 86400,
        description="A domain whose `auto` fetcher moved up to impersonate or browser tries "
        "the cheapest fetcher again this long after the last change or probe "
        "(docs/FETCHING.md, Fetcher escalation).",
    )
    max_body_bytes: int = Field(
        10 * 1024 * 1024,
        ge=1024,
        description="Largest response body accepted, after decompression; larger is `too_large`.",
    )
    chromium_path: Path = Field(
        Path("/usr/bin/chromium"),
        description="Chromium binary the `browser` fetcher drives through Playwright "
        "(started on first use, one per process).",
    )
    browser_max_pages: int = Field(
        8,
        ge=1,
        le=256,
        description="Pages the `browser` fetcher renders at once in one process; other "
        "browser fetches wait (not counted in their timeout).",
    )
    browser_navigation_timeout_seconds: float | None = Field(
        None,
        gt=0,
        description="The seed's NAVIGATION_TIMEOUT_SECONDS: a monitor poll's navigation is "
        "bounded by FORAGER_MONITOR_PAGE_TIMEOUT_SECONDS with the rest of the page, so a value "
        "no shorter than that is honoured as it is, and a shorter one is refused at start-up.",
    )
    browser_selector_timeout_seconds: float = Field(
        0.0,
        ge=0,
        description="Longest a `browser` fetch waits for its domain's `wait_for_selector`, "
        "within the fetch's own timeout; 0: the fetch's timeout alone (the seed's "
        "SELECTOR_TIMEOUT_SECONDS).",
    )
    max_request_bytes: int = Field(
        5 * 1024 * 1024,
        ge=1024,
        description="Largest API request body accepted; larger ones are refused with 413.",
    )
    user_agent: str = Field(
        "Forager/0.1 (self-hosted crawler)",
        min_length=1,
        description="User-Agent of new domains (each domain can override it).",
    )
    default_crawl_delay_seconds: float = Field(
        1.0,
        ge=0,
        description="Minimum gap between requests to one new domain, all workers together.",
    )
    default_max_concurrent_requests: int = Field(
        5, ge=1, description="In-flight requests allowed to one new domain, all workers together."
    )
    default_crawl_frequency_seconds: int = Field(
        86400, ge=60, description="Recrawl period of recurring tasks that do not set their own."
    )
    secret_key: SecretStr | None = Field(
        None,
        description="Key that encrypts proxy passwords at rest (Fernet, urlsafe base64 of 32 "
        "bytes); when unset one is generated into <data_dir>/secret.key with a warning.",
    )
    log_level: str = Field(
        "INFO", description="Logging level (DEBUG, INFO, WARNING or WARN, ERROR, CRITICAL)."
    )
    log_format: str = Field(
        "text",
        description="`text` (one readable line per record) or `json` (one JSON object "
        "per line: time, level, logger, message, exception).",
    )
    prometheus_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Serve `/metrics` on this port (on FORAGER_HOST) instead of the API's.",
    )
    health_check_enabled: bool = Field(
        True, description="Serve `/health`; false answers 404 there (the seed's switch)."
    )
    # -- fetch policy (issue 5): proxy health, circuit breakers, robots.txt, throttling --
    ca_bundle_file: Path | None = Field(
        None,
        description="PEM file of extra certificate authorities the http fetcher trusts, besides "
        "the default ones (a private CA, a TLS-intercepting or https:// proxy).",
    )
    mapping_failure_limit: int = Field(
        5, ge=1, description="Consecutive failures that disable a proxy for one domain."
    )
    proxy_failure_limit: int = Field(
        10, ge=1, description="Consecutive failures that disable a proxy everywhere."
    )
    proxy_retest_base_seconds: float = Field(
        60.0, gt=0, description="First background re-test of a disabled proxy; doubles per failure."
    )
    proxy_retest_max_seconds: float = Field(
        3600.0, gt=0, description="Upper bound of the gap between re-tests of a disabled proxy."
    )
    proxy_test_url: str = Field(
        "http://example.com/",
        description="URL fetched through a disabled proxy to re-test it (any 2xx/3xx passes).",
    )
    breaker_failure_threshold: int = Field(
        5, ge=1, description="Consecutive failures that open a domain's or a proxy's breaker."
    )
    breaker_open_seconds: float = Field(
        60.0, ge=0, description="How long an open breaker refuses work before it half-opens."
    )
    breaker_success_threshold: int = Field(
        5, ge=1, description="Successes in half-open state that close a breaker again."
    )
    robots_refresh_seconds: float = Field(
        86400.0, gt=0, description="Age after which a domain's cached robots.txt is fetched again."
    )
    throttle_max_delay_seconds: float = Field(
        60.0, ge=0, description="Ceiling of a domain's adaptive (throttled) delay."
    )
    throttle_slow_seconds: float = Field(
        10.0, gt=0, description="Responses at least this slow raise a domain's adaptive delay."
    )
    throttle_target_concurrency: float = Field(
        1.0,
        gt=0,
        description="Requests in flight per domain that adaptive throttling aims for "
        "(delay target = response time / this).",
    )
    # -- home-network agents (issue 6) --
    agent_heartbeat_seconds: float = Field(
        10.0, gt=0, description="How often connected agents send a heartbeat (told at connect)."
    )
    agent_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="An agent silent this long is disconnected and its tasks go back to pending.",
    )
    # -- the task path (issue 14): parsing off the event loop, the writer's batches --
    parse_processes: int = Field(
        0,
        ge=0,
        le=64,
        description="Parse worker processes per Forager process (0: one per CPU core).",
    )
    parse_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="How many steps lower the parse processes' CPU priority is than their "
        "event loop's (Unix nice): on a busy machine the event loop, which every page goes "
        "through, gets a core first.",
    )
    parse_timeout_seconds: float = Field(
        20.0,
        gt=0,
        description="Time budget of one page's parse; a page over it fails `parse` and its "
        "parse process is killed and replaced.",
    )
    parser_modules: list[str] = Field(
        default_factory=list,
        description="Python modules every parse process imports first (parsers that register "
        "themselves on import).",
    )
    writer_batch_size: int = Field(
        64, ge=1, le=1000, description="Finished tasks a worker commits in one transaction at most."
    )
    writer_interval_seconds: float = Field(
        0.03,
        ge=0,
        le=5,
        description="How long a worker's writer gathers finished tasks before it commits them.",
    )

    # -- missions (issue 16, seed 003 §8): the orchestrator's clocks and limits --
    mission_loop_seconds: float = Field(
        5.0, gt=0, description="How often the orchestrator loop looks at queue and writers."
    )
    mission_session_poll_seconds: float = Field(
        10.0, gt=0, description="Polling of a worker service's session until it is ready."
    )
    mission_session_timeout_seconds: float = Field(
        180.0, gt=0, description="A session not ready after this long fails with ERROR101."
    )
    mission_job_poll_seconds: float = Field(
        30.0, gt=0, description="Polling of a worker service's scrape job."
    )
    mission_job_timeout_seconds: float = Field(
        6000.0, gt=0, description="A scrape job still running after this long is ERROR202."
    )
    mission_writer_poll_seconds: float = Field(30.0, gt=0, description="Polling of a writer job.")
    mission_writer_timeout_seconds: float = Field(
        3600.0, gt=0, description="A writer job still processing after this long is ERROR300."
    )
    mission_poll_failure_limit: int = Field(
        3,
        ge=1,
        description="Polls in a row that get no usable answer (5xx, garbage, timeout) before "
        "the job counts as failed.",
    )
    mission_http_timeout_seconds: float = Field(
        30.0, gt=0, description="Timeout of one request to a worker service or writer."
    )
    mission_max_response_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="Largest answer read from a worker service or writer; larger is garbage.",
    )
    mission_proxy_failure_limit: int = Field(
        3, ge=1, description="Session failures in a row that disable a proxy (seed §6.3)."
    )
    mission_leader_lease_seconds: float = Field(
        15.0,
        gt=0,
        description="Lease of the one orchestrator loop among all processes; another takes "
        "over within this long when its holder dies.",
    )
    mission_max_span_days: int = Field(
        31, ge=1, le=3660, description="Longest date range one mission (or one split) may cover."
    )

    # -- self-supervision of worker processes (issue 15) --
    worker_memory_limit_mb: int = Field(
        0,
        ge=0,
        description="`forager worker` recycles itself (finishes its work, gives everything "
        "back and starts afresh) when its process tree (parse processes, Chromium) uses more "
        "memory than this; 0: never.",
    )
    worker_max_lifetime_hours: float = Field(
        0.0, ge=0, description="`forager worker` recycles itself after this long; 0: never."
    )
    # -- live monitors (issue 15, seed scraper-resilience): one URL watched continuously --
    monitor_slots: int = Field(
        32,
        ge=0,
        le=10_000,
        description="Monitors one process runs at most (`forager worker`, and `serve` when "
        "FORAGER_SERVE_WORKERS > 0); 0: this process runs none.",
    )
    monitor_interval_seconds: float = Field(
        2.5, gt=0, le=86400, description="Baseline polling interval of a new monitor."
    )
    monitor_min_interval_seconds: float = Field(
        0.5,
        gt=0,
        le=86400,
        description="Default lower bound of a monitor's adaptive interval (faster while its "
        "data changes).",
    )
    monitor_max_interval_seconds: float = Field(
        60.0,
        gt=0,
        le=86400,
        description="Default upper bound of a monitor's adaptive interval (slower while its data "
        "is unchanged or errors rise); must stay below FORAGER_MONITOR_DEGRADED_SECONDS.",
    )
    monitor_max_lifetime_hours: float = Field(
        6.0, gt=0, le=720, description="A monitor's run restarts (new scraper id) after this long."
    )
    monitor_staleness_seconds: float = Field(
        300.0,
        gt=0,
        description="Age of a monitor's last successful poll that makes it `failing` and "
        "restarts its run.",
    )
    monitor_degraded_seconds: float = Field(
        120.0,
        gt=0,
        description="Age of a monitor's last successful poll that makes it `degraded`.",
    )
    monitor_restart_errors: int = Field(
        10, ge=1, description="Consecutive errors above which a monitor's run restarts."
    )
    monitor_memory_soft_limit_mb: int = Field(
        1536,
        ge=64,
        description="Memory (RSS of a browser monitor's own Chromium, else of the process and "
        "its children) above which a monitor's run restarts gracefully.",
    )
    monitor_memory_restart_min_seconds: float = Field(
        60.0,
        ge=0,
        description="A run lives at least this long before memory may restart it, so a "
        "process that stays above the soft limit does not restart its monitors every cycle.",
    )
    monitor_memory_hard_limit_mb: int = Field(
        2048,
        ge=64,
        description="Memory above which a browser monitor's own Chromium is killed at once "
        "(then its run restarts).",
    )
    monitor_retry_max_attempts: int = Field(
        5, ge=0, le=20, description="Retries of a failed poll within one cycle."
    )
    monitor_retry_base_seconds: float = Field(
        1.0, ge=0, description="First retry delay of a failed poll; doubles per retry."
    )
    monitor_retry_max_seconds: float = Field(
        16.0, ge=0, description="Upper bound of a monitor's retry delay."
    )
    monitor_page_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="Timeout of one monitor poll's fetch; its page is then read in a parse "
        "process under FORAGER_PARSE_TIMEOUT_SECONDS.",
    )
    monitor_min_timeout_seconds: float = Field(
        5.0,
        gt=0,
        description="Floor of a monitor's adaptive poll timeout (5 × its usual poll time, "
        "at most FORAGER_MONITOR_PAGE_TIMEOUT_SECONDS).",
    )
    monitor_lease_seconds: float = Field(
        30.0,
        gt=0,
        description="Lease of a monitor on the process running it; another process takes it "
        "over within this long when its holder dies.",
    )
    monitor_claim_seconds: float = Field(
        5.0,
        gt=0,
        description="How often a process renews its monitors' leases and looks for unclaimed "
        "ones; at most half of FORAGER_MONITOR_LEASE_SECONDS.",
    )
    monitor_log_retention_days: float = Field(
        30.0,
        gt=0,
        description="Health samples and resolved scraper errors older than this are deleted "
        "(hourly, by every process running monitors).",
    )
    monitor_health_log_seconds: float = Field(
        60.0, gt=0, description="How often each running monitor writes a scraper_health_log row."
    )
    monitor_max_queue_size: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="Snapshots one process holds at most while they wait to be written "
        "(seed MAX_QUEUE_SIZE); past it the oldest unwritten ones are dropped and counted, "
        "never the latest.",
    )
    monitor_max_queue_size_mb: float = Field(
        10.0,
        gt=0,
        le=10_000,
        description="The same bound in megabytes of snapshot data (seed MAX_QUEUE_SIZE_MB).",
    )

    feed_chunk_rows: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="Rows a feed run reads per database page and writes per Parquet row "
        "group (issue 35).",
    )
    # -- network hardening (issue 11): where requests may go, the browser's sandbox --
    alert_poll_seconds: float = Field(
        2.0,
        gt=0,
        le=3600,
        description="How often the alert delivery loop (in `serve` and every `forager worker`) "
        "looks for due deliveries in the outbox.",
    )
    alert_evaluate_seconds: float = Field(
        60.0,
        gt=0,
        le=86400,
        description="How often the operational alert rules (proxies_low, failure_rate_high, "
        "parse_rate_low, monitor_stale, monitor_failing) are measured by the scheduler of "
        "`serve` and every `forager worker`.",
    )
    alert_timeout_seconds: float = Field(
        10.0,
        gt=0,
        le=300,
        description="How long one webhook or Apprise delivery may take before it counts as "
        "failed and is retried.",
    )
    alert_retry_base_seconds: float = Field(
        30.0,
        gt=0,
        le=86400,
        description="Wait before the first retry of a failed alert delivery; doubles with each "
        "further try, up to FORAGER_ALERT_RETRY_MAX_SECONDS.",
    )
    alert_retry_max_seconds: float = Field(
        3600.0,
        gt=0,
        le=7 * 86400,
        description="Longest wait between two tries of an alert delivery.",
    )
    alert_ca_file: Path | None = Field(
        None,
        description="PEM file of extra certificate authorities that HTTPS webhook targets may "
        "present certificates from, besides the default ones (certifi's): a receiver behind a "
        "private CA. An untrusted certificate fails the try with the TLS error recorded.",
    )
    alert_max_attempts: int = Field(
        8,
        ge=1,
        le=100,
        description="Tries of an alert delivery before it is marked failed (it can still be "
        "re-sent from the API or the dashboard).",
    )
    private_targets: str = Field(
        "submitted",
        description="Which non-public addresses fetches may reach: `submitted` (only the host "
        "of a URL the operator submitted; redirects and robots.txt hops into private addresses "
        "are refused), `all`, or `none`. Link-local and cloud metadata addresses are always "
        "refused.",
    )
    browser_no_sandbox: bool = Field(
        False,
        description="Run Chromium without its sandbox. Only for hosts where neither the sandbox "
        "nor dropping to FORAGER_BROWSER_USER works; a page that breaks out of the renderer "
        "then runs as Forager's own user.",
    )
    browser_user: str = Field(
        "nobody",
        min_length=1,
        description="When Forager runs as root, the unprivileged user Chromium runs as "
        "(through setpriv), with its sandbox on.",
    )

    config_file: Path | None = Field(
        None,
        description="Optional YAML file of the seed's shape (`scraper: lifecycle: …`) or of "
        "setting names; environment variables override it; unknown keys are refused.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Explicit values, FORAGER_* variables, the seed's names, .env, the YAML file."""
        from forager.config_file import SeedSources

        return (
            init_settings,
            env_settings,
            SeedSources(settings_cls, file=False),
            dotenv_settings,
            SeedSources(settings_cls, file=True),
            file_secret_settings,
        )

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Settings:
        url = self.resolved_database_url
        if not (url.startswith("sqlite+aiosqlite://") or url.startswith("postgresql+asyncpg://")):
            raise ValueError(
                "FORAGER_DATABASE_URL must be a sqlite:// or postgresql:// URL "
                f"(got {url.split('://', 1)[0]}://…)"
            )
        if self.heartbeat_seconds * 2 > self.lease_seconds:
            raise ValueError(
                "FORAGER_HEARTBEAT_SECONDS must be at most half of FORAGER_LEASE_SECONDS, "
                "or live tasks would lose their lease between two heartbeats"
            )
        if self.retry_base_seconds > self.retry_max_seconds:
            raise ValueError("FORAGER_RETRY_BASE_SECONDS must not exceed FORAGER_RETRY_MAX_SECONDS")
        if self.log_level.upper() not in {"DEBUG", "INFO", "WARN", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError(
                "FORAGER_LOG_LEVEL must be one of DEBUG, INFO, WARNING (or WARN), ERROR, CRITICAL"
            )
        if self.log_format not in ("text", "json"):
            raise ValueError("FORAGER_LOG_FORMAT must be text or json")
        if self.private_targets not in ("submitted", "all", "none"):
            raise ValueError("FORAGER_PRIVATE_TARGETS must be one of submitted, all, none")
        if self.agent_heartbeat_seconds * 2 > self.agent_timeout_seconds:
            raise ValueError(
                "FORAGER_AGENT_HEARTBEAT_SECONDS must be at most half of "
                "FORAGER_AGENT_TIMEOUT_SECONDS, or one late heartbeat would disconnect an agent"
            )
        self._refuse_bad_monitor_settings()
        self._refuse_bad_page_store()
        return self

    def _refuse_bad_page_store(self) -> None:
        if not self.page_store:
            return
        if self.s3_bucket is None:
            raise ValueError(
                "FORAGER_PAGE_STORE must be empty or s3://bucket/prefix, with a bucket name of "
                "3-63 lowercase letters, digits, dots and hyphens"
            )
        if not self.s3_access_key_id or self.s3_secret_access_key is None:
            raise ValueError(
                "FORAGER_PAGE_STORE=s3://… needs FORAGER_S3_ACCESS_KEY_ID and "
                "FORAGER_S3_SECRET_ACCESS_KEY"
            )
        if self.s3_endpoint_url and not re.fullmatch(r"https?://[^/\s]+/?", self.s3_endpoint_url):
            raise ValueError("FORAGER_S3_ENDPOINT_URL must be http(s)://host[:port]")

    def _refuse_bad_monitor_settings(self) -> None:
        """Monitor bounds that contradict each other are refused, naming the setting."""
        if not (
            self.monitor_min_interval_seconds
            <= self.monitor_interval_seconds
            <= self.monitor_max_interval_seconds
        ):
            raise ValueError(
                "FORAGER_MONITOR_INTERVAL_SECONDS must lie within FORAGER_MONITOR_MIN_INTERVAL_"
                "SECONDS and FORAGER_MONITOR_MAX_INTERVAL_SECONDS"
            )
        if self.monitor_max_interval_seconds >= self.monitor_degraded_seconds:
            raise ValueError(
                "FORAGER_MONITOR_MAX_INTERVAL_SECONDS must be below FORAGER_MONITOR_DEGRADED_"
                "SECONDS, or a healthy monitor polling at its slowest would look stale"
            )
        if self.monitor_degraded_seconds >= self.monitor_staleness_seconds:
            raise ValueError(
                "FORAGER_MONITOR_DEGRADED_SECONDS must be below FORAGER_MONITOR_STALENESS_SECONDS"
            )
        if self.monitor_memory_soft_limit_mb > self.monitor_memory_hard_limit_mb:
            raise ValueError(
                "FORAGER_MONITOR_MEMORY_SOFT_LIMIT_MB must not exceed "
                "FORAGER_MONITOR_MEMORY_HARD_LIMIT_MB"
            )
        if self.monitor_retry_base_seconds > self.monitor_retry_max_seconds:
            raise ValueError(
                "FORAGER_MONITOR_RETRY_BASE_SECONDS must not exceed "
                "FORAGER_MONITOR_RETRY_MAX_SECONDS"
            )
        navigation = self.browser_navigation_timeout_seconds
        if navigation is not None and navigation < self.monitor_page_timeout_seconds:
            raise ValueError(
                "FORAGER_BROWSER_NAVIGATION_TIMEOUT_SECONDS (the seed's "
                "NAVIGATION_TIMEOUT_SECONDS) must not be below "
                "FORAGER_MONITOR_PAGE_TIMEOUT_SECONDS (the seed's "
                "PAGE_TIMEOUT_SECONDS): a browser's navigation is bounded by the page timeout only"
            )
        if self.monitor_claim_seconds * 2 > self.monitor_lease_seconds:
            raise ValueError(
                "FORAGER_MONITOR_CLAIM_SECONDS must be at most half of "
                "FORAGER_MONITOR_LEASE_SECONDS, or running monitors would lose their lease"
            )

    @property
    def agent_heartbeat_interval(self) -> float:
        """The heartbeat agents are told to keep: the setting, or half the lease when that is
        shorter, since an agent's heartbeat is what keeps its tasks' leases alive."""
        return min(self.agent_heartbeat_seconds, self.lease_seconds / 2)

    @property
    def sqlite_file(self) -> Path:
        """The embedded database's file, used when ``database_url`` is empty."""
        return self.data_dir / "forager.db"

    @property
    def resolved_database_url(self) -> str:
        """The database URL in effect, with plain ``postgresql://`` mapped to asyncpg."""
        url = self.database_url.strip()
        if not url:
            return f"sqlite+aiosqlite:///{self.sqlite_file.resolve()}"
        for plain in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
            if url.startswith(plain):
                return "postgresql+asyncpg://" + url[len(plain) :]
        if url.startswith("sqlite://") or url.startswith("sqlite:///"):
            return "sqlite+aiosqlite://" + url[len("sqlite://") :]
        return url

    @property
    def pages_dir(self) -> Path:
        return self.page_store_dir or self.data_dir / "pages"

    @property
    def page_retention_on(self) -> bool:
        return bool(self.page_retention_keep_last or self.page_retention_days)

    @property
    def s3_bucket(self) -> tuple[str, str] | None:
        """``(bucket, prefix)`` of an ``s3://`` page store (None: the local directory)."""
        match = re.fullmatch(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/[^\s]*)?", self.page_store)
        if match is None:
            return None
        return match[1], (match[2] or "").strip("/")

    @property
    def s3_endpoint(self) -> str:
        """The S3 endpoint in effect, without a trailing slash."""
        return (self.s3_endpoint_url or f"https://s3.{self.s3_region}.amazonaws.com").rstrip("/")


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment, translating refusals into one clear ``ConfigError``."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            ("FORAGER_" + str(err["loc"][0]).upper() + ": " if err["loc"] else "")
            + err["msg"].removeprefix("Value error, ")
            for err in exc.errors()
        )
        raise ConfigError(f"invalid configuration: {problems}") from exc


@cache
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return load_settings()
