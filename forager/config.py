"""Forager's settings: one pydantic-settings object from ``FORAGER_*`` variables and ``.env``."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    page_store_dir: Path | None = Field(
        None, description="Where raw pages are stored (gzip); default <data_dir>/pages."
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
    heartbeat_seconds: float = Field(
        10.0, gt=0, description="How often a worker renews the leases of its in-flight tasks."
    )
    poll_seconds: float = Field(
        1.0, gt=0, description="How long an idle worker waits before looking for work again."
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
    log_level: str = Field("INFO", description="Logging level (DEBUG, INFO, WARNING, ERROR).")
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
    # -- operator opt-outs that weaken safety (issue 11): each one is named by /health --
    browser_no_sandbox: bool = Field(
        False, description="Run Chromium without its sandbox (unsafe; shown in /health)"
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
        if self.log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("FORAGER_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR")
        if self.agent_heartbeat_seconds * 2 > self.agent_timeout_seconds:
            raise ValueError(
                "FORAGER_AGENT_HEARTBEAT_SECONDS must be at most half of "
                "FORAGER_AGENT_TIMEOUT_SECONDS, or one late heartbeat would disconnect an agent"
            )
        return self

    @property
    def agent_heartbeat_interval(self) -> float:
        """The heartbeat agents are told to keep: the setting, or half the lease when that is
        shorter, since an agent's heartbeat is what keeps its tasks' leases alive."""
        return min(self.agent_heartbeat_seconds, self.lease_seconds / 2)

    @property
    def resolved_database_url(self) -> str:
        """The database URL in effect, with plain ``postgresql://`` mapped to asyncpg."""
        url = self.database_url.strip()
        if not url:
            return f"sqlite+aiosqlite:///{(self.data_dir / 'forager.db').resolve()}"
        for plain in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
            if url.startswith(plain):
                return "postgresql+asyncpg://" + url[len(plain) :]
        if url.startswith("sqlite://") or url.startswith("sqlite:///"):
            return "sqlite+aiosqlite://" + url[len("sqlite://") :]
        return url

    @property
    def pages_dir(self) -> Path:
        return self.page_store_dir or self.data_dir / "pages"


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
