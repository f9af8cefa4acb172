"""Bodies of ``/api/alerts`` (issue 17): rules (subscriptions) and their deliveries."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from forager.alerts.admin import (
    BATCH_KINDS,
    DOMAIN_KINDS,
    JOB_KINDS,
    MIN_ATTEMPTS_KINDS,
    MONITOR_KINDS,
    PERCENT_KINDS,
    REQUIRED,
    TAG_KINDS,
    THRESHOLD_KINDS,
    WINDOW_KINDS,
)
from forager.alerts.rules import PRICE_KINDS, PRODUCT_KINDS
from forager.api.wire import MAX_JSON_ID, BodyMoney, CrawlURL, JsonBody, Shape, Tag, without_null

AlertKind = Literal[
    "price_drop",
    "price_rise",
    "price_below",
    "price_above",
    "back_in_stock",
    "out_of_stock",
    "task_failed",
    "breaker_opened",
    "agent_blocked",
    "mission_finished",
    "mission_failed",
    "monitor_changed",
    "budget_exhausted",
    "proxies_low",
    "failure_rate_high",
    "parse_rate_low",
    "monitor_stale",
    "monitor_failing",
]
# Rules a task or batch submission made for its completion webhook (issue 35): shown and
# deletable like any rule, never created through the rules API.
SentKind = AlertKind | Literal["task_completed", "batch_completed"]
DeliveryStatus = Literal["pending", "delivered", "failed"]
APPRISE_URL = r"^[A-Za-z][A-Za-z0-9+.-]*://[^\s\x00-\x1f\x7f]+(?![\s\S])"
AppriseURL = Annotated[str, Shape(APPRISE_URL, "an Apprise URL like mailto://… or tgram://…", 2000)]
Percent = Annotated[float, Field(gt=0, le=1000)]
RuleId = Annotated[int, Field(ge=1, le=MAX_JSON_ID)]


def _only_for(field: str, kinds: tuple[str, ...], when: dict[str, Any] | None = None) -> Any:
    present = when or {"required": [field]}
    return {"if": present, "then": {"properties": {"kind": {"enum": list(kinds)}}}}


_EXAMPLE = {
    "name": "Kettle below 80 €",
    "kind": "price_below",
    "threshold": "80.00",
    "min_change_abs": "0.05",
    "domain_id": 1,
    "webhook_url": "https://hooks.example.com/forager",
}
_RULES = [
    {"oneOf": [{"required": ["webhook_url"]}, {"required": ["apprise_url"]}]},
    {
        "if": {"properties": {"kind": {"enum": list(THRESHOLD_KINDS)}}},
        "then": {"required": ["threshold"]},
    },
    {
        "if": {
            "properties": {"kind": {"enum": [k for k, f in REQUIRED.items() if f == "percent"]}}
        },
        "then": {"required": ["percent"]},
    },
    _only_for("threshold", THRESHOLD_KINDS),
    _only_for("percent", PERCENT_KINDS),
    _only_for("window_seconds", WINDOW_KINDS),
    _only_for("min_attempts", MIN_ATTEMPTS_KINDS),
    _only_for("monitor_id", MONITOR_KINDS),
    _only_for("job_id", JOB_KINDS),
    _only_for("min_change_abs", PRICE_KINDS),
    _only_for("min_change_pct", PRICE_KINDS),
    _only_for(
        "fire_on_first",
        PRODUCT_KINDS,
        {"required": ["fire_on_first"], "properties": {"fire_on_first": {"const": True}}},
    ),
    _only_for("product_id", PRODUCT_KINDS),
    _only_for("domain_id", DOMAIN_KINDS),
    _only_for("batch_name", BATCH_KINDS),
    _only_for("tag", TAG_KINDS),
]


_OPTIONAL = (
    "webhook_url",
    "apprise_url",
    "percent",
    "threshold",
    "min_change_abs",
    "min_change_pct",
    "product_id",
    "domain_id",
    "batch_name",
    "tag",
    "window_seconds",
    "min_attempts",
    "monitor_id",
    "job_id",
)


class AlertRuleCreate(JsonBody):
    """A subscription: an event kind, its conditions and scope, and exactly one target."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=without_null(*_OPTIONAL, also={"allOf": _RULES, "examples": [_EXAMPLE]}),
    )

    name: str = Field(min_length=1, max_length=100)
    kind: AlertKind = Field(
        description="price_drop / price_rise (by percent), price_below / price_above (each "
        "crossing of threshold), back_in_stock, out_of_stock, task_failed (for good), "
        "breaker_opened (a domain's), agent_blocked, mission_finished, mission_failed, "
        "monitor_changed (a monitor's value or state). Operational, told when they fire and "
        "again when they clear: budget_exhausted (a crawl job's pages or time), proxies_low "
        "(active proxies below threshold), failure_rate_high (failed fetches over "
        "window_seconds at or above percent), parse_rate_low (pages parsed below percent), "
        "monitor_stale (no successful poll for window_seconds), monitor_failing (min_attempts "
        "failed polls in a row)."
    )
    webhook_url: CrawlURL | None = Field(
        None, description="POST a signed JSON body here (see docs/ALERTS.md)."
    )
    apprise_url: AppriseURL | None = Field(
        None,
        description="Send to people through Apprise (mailto://, slack://, tgram://, discord:// "
        "…); stored encrypted, shown back masked. Each service has its own URL grammar, "
        "Apprise's to say: a URL Apprise does not recognise is refused (422 naming the field).",
    )
    percent: Percent | None = Field(
        None,
        description="price_drop / price_rise: at least this many percent (default: any); "
        "failure_rate_high: fires at or above this failed share; parse_rate_low: fires below "
        "this parsed share (both required).",
    )
    threshold: BodyMoney | None = Field(
        None,
        description="price_below / price_above: the price whose crossing fires; proxies_low: "
        "fires while fewer proxies than this are active.",
    )
    window_seconds: Annotated[int, Field(ge=10, le=30 * 86400)] | None = Field(
        None,
        description="failure_rate_high / parse_rate_low: the rate over the last this many "
        "seconds; monitor_stale: stale after this long without a successful poll (default 600).",
    )
    min_attempts: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        None,
        description="failure_rate_high / parse_rate_low: fewer fetches in the window say "
        "nothing (default 10); monitor_failing: this many failed polls in a row (default 3).",
    )
    monitor_id: RuleId | None = Field(
        None, description="monitor_changed / monitor_stale / monitor_failing: only this monitor."
    )
    job_id: RuleId | None = Field(None, description="budget_exhausted: only this crawl job.")
    min_change_abs: BodyMoney | None = Field(
        None, description="Price rules: a smaller move (in currency) is noise, not a change."
    )
    min_change_pct: Annotated[float, Field(ge=0, le=1000)] | None = Field(
        None, description="Price rules: a smaller move (in percent) is noise, not a change."
    )
    fire_on_first: bool = Field(
        False,
        description="Product rules: also fire on a product's first observation when the "
        "condition already holds.",
    )
    product_id: RuleId | None = Field(None, description="Only this product.")
    domain_id: RuleId | None = Field(None, description="Only this domain's products / tasks.")
    batch_name: Annotated[str, Field(min_length=1, max_length=255)] | None = Field(
        None, description="Only products (or tasks) of tasks submitted with this batch name."
    )
    tag: Tag | None = Field(
        None, description="Only products (or tasks) whose URL has this tag (product tags)."
    )
    enabled: bool = True

    @field_validator(*_OPTIONAL, mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("may not be null (leave the field out instead)")
        return value


class AlertRuleUpdate(JsonBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"enabled": False}]})

    enabled: bool = Field(description="Fire this rule (true) or keep it quiet (false).")


class AlertRulePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    kind: SentKind
    enabled: bool
    percent: float | None
    threshold: Decimal | None
    min_change_abs: Decimal | None
    min_change_pct: float | None
    fire_on_first: bool
    product_id: int | None
    domain_id: int | None
    batch_name: str | None
    tag: str | None = None
    window_seconds: int | None = None
    min_attempts: int | None = None
    monitor_id: int | None = None
    job_id: int | None = None
    channel: Literal["webhook", "apprise"]
    target: str = Field(description="The target URL, masked (its secrets are never shown).")
    signed: bool = Field(description="Deliveries carry X-Forager-Signature.")
    created_at: datetime
    updated_at: datetime


class AlertRuleCreated(AlertRulePublic):
    secret: str | None = Field(
        description="A webhook's HMAC-SHA256 signing secret: shown this once, never again."
    )


class AlertAttemptPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    started_at: datetime
    duration_ms: int
    status_code: int | None = Field(description="The receiver's HTTP status, if it answered.")
    error: str | None


class AlertDeliveryPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    rule_id: int
    event: SentKind
    subject_type: str
    subject_id: str
    status: DeliveryStatus
    attempts: int = Field(description="Tries so far (reset by a re-send).")
    next_attempt_at: datetime
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
    payload: dict[str, Any] = Field(description="The JSON body sent (plus delivery_id).")


class AlertDeliveryDetail(AlertDeliveryPublic):
    history: list[AlertAttemptPublic] = Field(description="Every try, oldest first.")
