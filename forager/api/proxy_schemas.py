"""Request and response bodies of the proxy and domain ↔ proxy mapping API.

Passwords are write-only: ``SecretStr`` on the way in, ``password_set`` on the way out.
Usernames are shown to admin keys only (providers put session or zone tokens there): a read
key gets ``proxy_username`` null and ``username_set``.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from forager.api.wire import (
    CRAWL_URL,
    HOST_NAME,
    MAX_JSON_ID,
    BodyMoney,
    JsonBody,
    Shape,
    without_null,
)
from forager.db.models import Proxy
from forager.proxies.admin import disabled_reason

ProxyProtocol = Literal["http", "https", "socks5"]
_MAX_PASSWORD_BYTES = 255  # its ciphertext must fit the 512-character column


def _host(value: str) -> str:
    return value.lower()


def _country(value: str) -> str:
    if len(value) != 2 or not value.isascii() or not value.isalpha():
        raise ValueError("a two-letter country code (ISO 3166-1 alpha-2)")
    return value.upper()


def _password(value: SecretStr) -> SecretStr:
    if len(value.get_secret_value().encode()) > _MAX_PASSWORD_BYTES:
        raise ValueError(f"at most {_MAX_PASSWORD_BYTES} bytes")
    return value


Host = Annotated[
    Annotated[
        str, Shape(HOST_NAME, "a bare host name or IPv4 address (no scheme, port or path)", 255)
    ],
    AfterValidator(_host),
]
CountryCode = Annotated[
    str,
    Shape(r"^[A-Za-z]{2}(?![\s\S])", "a two-letter country code (ISO 3166-1 alpha-2)", 2),
    AfterValidator(_country),
]
Password = Annotated[SecretStr, AfterValidator(_password)]
Lines = Annotated[
    str,
    Shape(r"^[^\x00]*[^\s\x00][^\x00]*(?![\s\S])", "at least one proxy line", 1_000_000),
]


class ProxyCreate(JsonBody):
    """A proxy; ``proxy_password`` is stored encrypted and never shown again."""

    model_config = ConfigDict(extra="forbid")

    proxy_url: Host = Field(description="Host name or IP address.")
    proxy_port: int = Field(ge=1, le=65535)
    proxy_protocol: ProxyProtocol = "http"
    proxy_username: str | None = Field(None, min_length=1, max_length=100)
    proxy_password: Password | None = Field(None, description="Write-only; encrypted at rest.")
    country_code: CountryCode | None = Field(None, description="ISO 3166-1 alpha-2, e.g. US.")
    city: str | None = Field(None, max_length=100)
    provider: str | None = Field(None, max_length=100)
    monthly_cost: BodyMoney | None = Field(None, description="Rounded to cents.")
    max_requests_per_hour: int = Field(1000, ge=1, le=10_000_000)

    def columns(self) -> dict[str, Any]:
        """Column values, the password in plain text (for the service to encrypt)."""
        values = self.model_dump()
        values["proxy_password"] = (
            self.proxy_password.get_secret_value() if self.proxy_password else None
        )
        return values


class ProxyUpdate(JsonBody):
    """Fields to change; an empty or null ``proxy_password`` clears the password."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=without_null(
            "proxy_url", "proxy_port", "proxy_protocol", "max_requests_per_hour"
        ),
    )

    proxy_url: Host | None = None
    proxy_port: int | None = Field(None, ge=1, le=65535)
    proxy_protocol: ProxyProtocol | None = None
    proxy_username: str | None = Field(None, max_length=100)
    proxy_password: Password | None = None
    country_code: CountryCode | None = None
    city: str | None = Field(None, max_length=100)
    provider: str | None = Field(None, max_length=100)
    monthly_cost: BodyMoney | None = Field(None, description="Rounded to cents.")
    max_requests_per_hour: int | None = Field(None, ge=1, le=10_000_000)

    @model_validator(mode="after")
    def _required_stay_set(self) -> ProxyUpdate:
        for name in ("proxy_url", "proxy_port", "proxy_protocol", "max_requests_per_hour"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null")
        return self

    def changes(self) -> dict[str, Any]:
        """The fields sent, the password in plain text; an empty username clears it."""
        values = self.model_dump(exclude_unset=True)
        if "proxy_password" in values:
            values["proxy_password"] = (
                self.proxy_password.get_secret_value() if self.proxy_password else None
            )
        if values.get("proxy_username") == "":
            values["proxy_username"] = None
        return values


class ProxyPublic(BaseModel):
    """A proxy as the API shows it: never the password, only whether one is set; the username
    to admin keys only."""

    id: int
    proxy_url: str
    proxy_port: int
    proxy_protocol: str
    proxy_username: str | None = Field(
        description="The username the proxy authenticates with, shown to admin keys only: "
        "always null for a read-only key (providers put session or zone tokens in it); "
        "``username_set`` says whether there is one."
    )
    username_set: bool = Field(description="Whether the proxy has a username (for any key).")
    password_set: bool
    is_active: bool
    failure_count: int
    success_count: int
    last_used_at: datetime | None
    last_success_at: datetime | None
    last_failure_at: datetime | None
    avg_response_time_ms: int | None
    country_code: str | None
    city: str | None
    provider: str | None
    monthly_cost: Decimal | None
    max_requests_per_hour: int
    created_at: datetime
    updated_at: datetime
    retest_at: datetime | None = Field(
        None, description="When the background re-test tries this disabled proxy; null if never."
    )
    last_test_at: datetime | None = Field(
        None,
        description="When the proxy was last tested (POST /api/proxies/{id}/test or the "
        "background re-test of a disabled proxy); null if never.",
    )
    last_test_ok: bool | None = Field(
        None, description="Whether that last test passed; null if never tested."
    )
    disabled_reason: str | None = Field(
        None,
        description="Why the proxy is out of rotation; null while it is enabled.",
        examples=["failed 10 times in a row; re-test at 2026-01-31 12:00:00 UTC"],
    )

    @classmethod
    def of(cls, proxy: Proxy, *, role: str) -> ProxyPublic:
        """``proxy`` as a key of ``role`` may see it."""
        derived = ("proxy_username", "username_set", "password_set", "disabled_reason")
        data = {n: getattr(proxy, n) for n in cls.model_fields if n not in derived}
        return cls(
            **data,
            proxy_username=proxy.proxy_username if role == "admin" else None,
            username_set=proxy.proxy_username is not None,
            password_set=bool(proxy.proxy_password),
            disabled_reason=disabled_reason(proxy),
        )


class ProxyBulkCreate(JsonBody):
    """Many proxies: ``lines`` of ``scheme://user:pass@host:port``, and/or full ``proxies``."""

    # At least one of the two (the description says so with anyOf): lines with something
    # besides spaces, or one proxy or more.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=without_null(
            "lines", also={"anyOf": [{"required": ["lines"]}, {"required": ["proxies"]}]}
        ),
    )

    lines: Lines | None = Field(None, description="One proxy per line.")
    # 200 a request keeps one call inside a client's timeout even on a busy server (each is
    # checked, encrypted and deduplicated); ``lines`` takes more.
    proxies: list[ProxyCreate] = Field(default_factory=list, min_length=1, max_length=200)

    @field_validator("lines", mode="before")
    @classmethod
    def _lines_not_null(cls, value: object) -> object:
        if value is None:  # only runs when sent: leave lines out instead
            raise ValueError("may not be null")
        return value

    @model_validator(mode="after")
    def _something(self) -> ProxyBulkCreate:
        if not (self.lines or "").strip() and not self.proxies:
            raise ValueError("give lines or proxies")
        return self


class ProxyBulkResult(BaseModel):
    input: str = Field(description="The line (password masked) or proxies[n].")
    result: Literal["created", "duplicate", "invalid"]
    proxy_id: int | None = None
    error: str | None = None


class ProxyBulkCreated(BaseModel):
    created: int
    duplicate: int
    invalid: int
    results: list[ProxyBulkResult]


class ProxyTestRequest(JsonBody):
    model_config = ConfigDict(extra="forbid")

    url: Annotated[str, Shape(CRAWL_URL, "an absolute http:// or https:// URL", 4096)] = Field(
        description="An http(s) URL to fetch through the proxy."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("an absolute http:// or https:// URL")
        return url.strip()


class ProxyTestResult(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    ok: bool
    status_code: int | None
    response_time_ms: int | None
    error_type: str | None
    error: str | None = Field(description="Never contains the proxy's credentials.")


class GroupCount(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    value: str | None
    total: int
    active: int


class ProxyStatsPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    total: int
    active: int
    disabled: int
    avg_response_time_ms: float | None
    by_country: list[GroupCount]
    by_provider: list[GroupCount]


class MappingAssign(JsonBody):
    model_config = ConfigDict(extra="forbid")

    proxy_ids: list[Annotated[int, Field(ge=1, le=MAX_JSON_ID)]] = Field(
        min_length=1, max_length=10_000
    )
    priority: int = Field(5, ge=1, le=10, description="1 is the highest priority.")


class AssignmentPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    assigned: list[int]
    already: list[int] = Field(description="Mapped before; left unchanged.")
    unknown: list[int] = Field(description="No such proxy.")


class DomainProxyPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    domain_id: int
    proxy_id: int
    priority: int
    is_active: bool
    success_count: int
    failure_count: int
    success_rate_percent: float | None
    avg_response_time_ms: int | None
    last_used_at: datetime | None
    proxy_url: str
    proxy_port: int
    proxy_protocol: str
    proxy_is_active: bool
    country_code: str | None
    source: str = Field(
        "admin",
        description="admin: mapped by an operator; pool: the domain used this global-pool proxy.",
    )


class DomainHealthPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    domain_id: int
    domain_name: str
    domain_is_active: bool
    total_proxies: int
    active_proxies: int
    failing_proxies: int = Field(description="Mappings with 5 or more consecutive failures.")
    avg_response_time_ms: float | None
    total_success: int
    total_failures: int
    failure_rate_percent: float | None


class AlertPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    kind: Literal["low_active_proxies", "high_failure_rate"]
    domain_id: int
    domain_name: str
    message: str


class ProxyHealthPublic(BaseModel):
    domains: list[DomainHealthPublic]
    alerts: list[AlertPublic]
