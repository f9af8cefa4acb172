"""Request and response bodies of the domains API."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from forager.api.profile_schemas import RequestProfileIn, RequestProfilePublic
from forager.api.sticky_session_schemas import StickySessionsIn, StickySessionsPublic
from forager.api.wire import HOST_NAME, SITE_URL, JsonBody, Shape, without_null
from forager.domains import profile
from forager.parse.registry import parser_names

SiteURL = Annotated[
    str, Shape(SITE_URL, "an http(s) URL: scheme, host name, optional port and path", 512)
]
HostName = Annotated[
    str, Shape(HOST_NAME, "a host name (letters, digits, dots and hyphens; IDN as xn--)", 253)
]
Selector = Annotated[
    str, Shape(r"^[^\x00-\x1f]*(?![\s\S])", "a CSS selector without control characters", 500)
]
Country = Annotated[
    str,
    Shape(r"^\s*(?:[A-Za-z]{2})?\s*(?![\s\S])", "a two-letter country code, or empty to clear", 2),
]

# One DNS label: letters, digits and inner hyphens, 1–63 characters.
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")


def check_domain_name(name: str) -> str:
    """A host name, IDNA-encoded and lowercased; no scheme, port, path or spaces."""
    try:
        host = name.strip().encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise ValueError(f"{name!r} is not a valid host name") from exc
    if len(host) > 253 or not _HOST.match(host):
        raise ValueError(
            f"{name!r} is not a host name (letters, digits, dots and hyphens only, no port)"
        )
    return host


def check_base_url(url: str) -> str:
    """An http(s) URL with a host and nothing after the path; the trailing slash is dropped."""
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("base_url must be an http or https URL with a host")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("base_url must not carry credentials, a query or a fragment")
    try:
        _ = parts.port
    except ValueError as exc:
        raise ValueError(f"base_url has an invalid port: {exc}") from exc
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path}".rstrip("/")


def check_parser_name(name: str) -> str:
    """A registered parser name."""
    if name not in parser_names():
        raise ValueError(f"unknown parser {name!r} (known: {', '.join(parser_names())})")
    return name


def check_wait_for_selector(selector: str) -> str | None:
    """A selector for the browser fetcher to wait for; blank means none (network idle)."""
    selector = selector.strip()
    if any(ord(c) < 32 for c in selector):
        raise ValueError("wait_for_selector must not contain control characters")
    return selector or None


class _Editable(JsonBody):
    """The settings of a domain an operator may set; ``None`` means "not given"."""

    # Every field may be left out, none may be null (``_not_null``): so says the description.
    model_config = ConfigDict(extra="forbid", json_schema_extra=without_null())

    base_url: SiteURL | None = Field(None, description="Default: https://<domain>.")
    parser_name: str | None = Field(
        None,
        description="Default: chosen from the host.",
        json_schema_extra=lambda schema: schema.update(enum=list[Any](parser_names())),
    )
    crawl_delay_seconds: float | None = Field(None, ge=0, le=3600)
    max_concurrent_requests: int | None = Field(None, ge=1, le=1000)
    default_crawl_frequency_seconds: int | None = Field(None, ge=60, le=31_536_000)
    user_agent: str | None = Field(None, min_length=1, max_length=255)
    is_active: bool | None = None
    fetcher: Literal["http", "impersonate", "browser", "auto"] | None = Field(
        None,
        description="How pages are fetched: http (httpx), impersonate (curl_cffi with a "
        "browser TLS/HTTP2 fingerprint), browser (Chromium, renders JavaScript), or auto: the "
        "cheapest of these that works, moving up on blocks, challenges and pages rendered by "
        "scripts, remembered per domain (auto_fetcher*). Setting it forgets what auto learnt.",
    )
    wait_for_selector: Selector | None = Field(
        None,
        description="browser fetcher: CSS selector to wait for; empty string clears it "
        "(then it waits for network idle).",
    )
    # Fetch policy (issue 5).
    proxy_strategy: Literal["lru", "random", "exclusive"] | None = Field(
        None,
        description="How a proxy is picked: lru (least recently used), random, or exclusive "
        "(leased to one fetch at a time; the next fetch gets another one).",
    )
    use_global_pool: bool | None = Field(
        None, description="With no proxy mapped: use every active proxy (else go direct)."
    )
    required_country_code: Country | None = Field(
        None,
        description="Only proxies in this country (ISO 3166-1 alpha-2); empty string clears.",
        examples=["BR"],
    )
    ignore_robots: bool | None = Field(None, description="Fetch even what robots.txt forbids.")
    download_images: bool | None = Field(
        None,
        description="Download the products' images into Forager's page store (through the "
        "domain's proxies, politeness and egress rules; image types only, at most "
        "FORAGER_IMAGE_MAX_BYTES, each distinct image stored once).",
    )
    proxy_rate_limit_rps: float | None = Field(
        None,
        ge=0,
        le=1000,
        description="Requests per second allowed per (domain, proxy) pair, across all "
        "workers, on top of the crawl delay; 0 clears it.",
    )
    request_profile: RequestProfileIn | None = Field(
        None,
        description="Headers and cookies every fetch of this domain carries (all three "
        "fetchers and agents), replacing the stored ones; {} clears them. Secret values are "
        "stored encrypted and never shown.",
    )
    # Agent routing (issue 33; docs/AGENTS.md "Routing").
    routing: Literal["any", "agents_preferred", "agents_only"] | None = Field(
        None,
        description="Who fetches its tasks: any (agents and workers), agents_only (home-network "
        "agents only; tasks wait while none is connected) or agents_preferred (agents; "
        "workers too while no agent is connected).",
    )
    sticky_sessions: StickySessionsIn | None = Field(
        None,
        description="Sticky sessions (cookie jar + proxy, reused, retired when blocked); "
        '{"enabled": false} turns them off.',
    )

    @field_validator("*")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        # Validators do not run on omitted fields: a None here was sent explicitly.
        if value is None:
            raise ValueError("may not be null")
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return check_base_url(value)

    @field_validator("parser_name")
    @classmethod
    def _parser(cls, value: str) -> str:
        return check_parser_name(value)

    @field_validator("wait_for_selector")
    @classmethod
    def _selector(cls, value: str) -> str | None:
        return check_wait_for_selector(value)

    @field_validator("required_country_code")
    @classmethod
    def _country(cls, value: str) -> str | None:
        value = value.strip()
        if not value:
            return None
        if len(value) != 2 or not value.isascii() or not value.isalpha():
            raise ValueError("must be a two-letter country code (ISO 3166-1 alpha-2)")
        return value.upper()

    @field_validator("proxy_rate_limit_rps")
    @classmethod
    def _rate(cls, value: float) -> float | None:
        return value or None


class DomainCreate(_Editable):
    domain_name: HostName = Field(examples=["www.amazon.com.br"])

    @field_validator("domain_name")
    @classmethod
    def _domain_name(cls, value: str) -> str:
        return check_domain_name(value)


class DomainUpdate(_Editable):
    """A partial update: only the fields sent change (``domain_name`` cannot)."""


class DomainPublic(BaseModel):
    """A domain as listed; ``task_counts`` has every task status, zeros included."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    domain_name: str
    base_url: str
    parser_name: str
    crawl_delay_seconds: float
    max_concurrent_requests: int
    default_crawl_frequency_seconds: int
    is_active: bool
    user_agent: str
    fetcher: str = Field(description="http, impersonate, browser or auto.")
    # Fetcher escalation (issue 33): what auto remembers; null until it moved off http.
    auto_fetcher: str | None = Field(
        None, description="auto: the fetcher that last worked (null: http, the cheapest)."
    )
    auto_fetcher_reason: str | None = Field(
        None, description="auto: why it moved there (what the cheaper fetchers met)."
    )
    auto_fetcher_changed_at: datetime | None = None
    auto_fetcher_probe_at: datetime | None = Field(
        None, description="auto: when the cheapest fetcher is tried again (null: none due)."
    )
    wait_for_selector: str | None = None
    proxy_strategy: str = Field("lru", description="lru, random or exclusive.")
    use_global_pool: bool = False
    required_country_code: str | None = None
    ignore_robots: bool = False
    download_images: bool = Field(False, description="Product images are downloaded.")
    proxy_rate_limit_rps: float | None = None
    throttle_delay_seconds: float | None = Field(
        None, description="Adaptive delay in force (429/503, slow answers); null when none."
    )
    request_profile: RequestProfilePublic | None = Field(
        None, description="Headers and cookies sent with every fetch; secret ones without value."
    )
    routing: Literal["any", "agents_preferred", "agents_only"] = Field(
        "any", description="Who fetches its tasks: any, agents_preferred or agents_only."
    )
    sticky_sessions: StickySessionsPublic | None = Field(
        None, description="The sticky session policy; null: fetches carry no session."
    )
    breaker_state: Literal["closed", "open", "half_open"] = Field(
        "closed", description="Circuit breaker (the stored state)."
    )
    breaker_opened_at: datetime | None = None
    robots_txt_url: str | None
    robots_txt_last_fetched: datetime | None
    next_fetch_at: datetime | None
    created_at: datetime
    updated_at: datetime
    task_counts: dict[str, int] = Field(default_factory=dict, description="Tasks by status.")

    @field_validator("request_profile", mode="before")
    @classmethod
    def _no_secret(cls, value: Any) -> Any:
        # The stored form holds sealed values: only its public view leaves the server.
        return profile.public(value) if isinstance(value, dict) else value


class DomainDetail(DomainPublic):
    robots_txt_content: str | None
    robots_txt_sitemaps: list[str] | None = Field(
        None, description="The Sitemap: URLs of the stored robots.txt; null until it is read."
    )


class RobotsRefreshed(DomainDetail):
    robots_error: str | None = Field(
        None, description="Why robots.txt could not be fetched (content left unchanged)."
    )


class AttemptStats(BaseModel):
    total: int
    by_outcome: dict[str, int]
    by_error_type: dict[str, int]
    avg_fetch_response_time_ms: float | None = Field(
        description="Mean response time of successful fetches."
    )


class DomainStats(BaseModel):
    domain_id: int
    tasks_by_status: dict[str, int]
    total_tasks: int
    attempts_last_24h: AttemptStats
    products: int
    last_completed_at: datetime | None
