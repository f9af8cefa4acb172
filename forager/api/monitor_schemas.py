"""Bodies of ``/api/monitors`` (issue 15): what a monitor watches and how it is doing."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from forager.api.wire import CrawlURL, JsonBody, Shape, choice_of
from forager.monitors.extract import CSS_SELECTOR, FIELD_NAME, MAX_FIELDS
from forager.parse.jsonpath import JSON_PATH
from forager.parse.registry import parser_names

FetcherName = Literal["http", "impersonate", "browser"]
MonitorStatus = Literal["active", "stale", "stopped", "error", "paused"]
HealthName = Literal["healthy", "degraded", "failing"]
FieldName = Annotated[
    str, Shape(FIELD_NAME, "a field name (a letter, then letters, digits, _)", 64)
]
CssSelector = Annotated[str, Shape(CSS_SELECTOR, "a CSS selector of the supported subset", 500)]


def _css_in_json_paths(value: str) -> str | None:
    """A CSS selector given to the JSON-paths reader: say which reader reads it."""
    if re.search(CSS_SELECTOR, value) is None:
        return None
    return (
        f"expected a dotted JSON path like score.home; {value!r} is a CSS selector: an HTML "
        "page is read with the CSS selectors reader (css instead of json_paths)"
    )


JsonPath = Annotated[
    str, Shape(JSON_PATH, "a dotted JSON path like score.home", 500, _css_in_json_paths)
]
# Below the default FORAGER_MONITOR_DEGRADED_SECONDS (120): the slowest interval must be.
Seconds = Annotated[float, Field(ge=0.05, lt=120)]


def _closed_maps(schema: dict[str, Any]) -> None:
    """Field names outside the pattern are refused, so the description says so too."""
    for name in ("css", "json_paths"):
        for option in schema["properties"][name].get("anyOf", []):
            if "patternProperties" in option:
                option["additionalProperties"] = False
    # Exactly one of parser_name, css and json_paths (a string or a map, not null); and
    # end_states only with a state_field: what the server checks, said in the description.
    schema["allOf"] = [
        {
            "oneOf": [
                {"required": ["parser_name"], "properties": {"parser_name": {"type": "string"}}},
                {"required": ["css"], "properties": {"css": {"type": "object"}}},
                {"required": ["json_paths"], "properties": {"json_paths": {"type": "object"}}},
            ]
        },
        {
            "if": {"required": ["end_states"], "properties": {"end_states": {"type": "array"}}},
            "then": {
                "required": ["state_field"],
                "properties": {"state_field": {"type": "string"}},
            },
        },
    ]
    schema["examples"] = [
        {
            "url": "https://example.com/live/123",
            "name": "Final score",
            "json_paths": {"home": "score.home", "away": "score.away"},
            "interval_seconds": 2.5,
        }
    ]


class MonitorCreate(JsonBody):
    """One URL to watch: exactly one of ``parser_name``, ``css`` and ``json_paths``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_closed_maps)

    url: CrawlURL = Field(examples=["https://example.com/live/123"])
    name: str | None = Field(None, max_length=100)
    fetcher: FetcherName = Field("http", description="http, impersonate or browser.")
    parser_name: str | None = Field(
        None,
        description="A registered parser (its product record is the data).",
        json_schema_extra=choice_of(parser_names),
    )
    css: dict[FieldName, CssSelector] | None = Field(
        None,
        min_length=1,
        max_length=MAX_FIELDS,
        description='Fields read from HTML: {"score": "#score", "link": "a.more@href"} (the '
        "text of the first match, or an attribute after @).",
    )
    json_paths: dict[FieldName, JsonPath] | None = Field(
        None,
        min_length=1,
        max_length=MAX_FIELDS,
        description='Fields read from a JSON page: {"home": "score.home", "first": '
        '"items.0.price"} (numbers index lists).',
    )
    state_field: FieldName | None = Field(
        None,
        description="A field of the data whose value is the monitor's state (live / ended, in "
        "stock / sold out): each change of it is an event.",
    )
    end_states: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None,
        max_length=20,
        description="States that stop the monitor when reached (needs state_field).",
    )
    interval_seconds: Seconds | None = Field(
        None, description="Baseline polling interval (default FORAGER_MONITOR_INTERVAL_SECONDS)."
    )
    min_interval_seconds: Seconds | None = Field(
        None,
        description="Fastest adaptive interval (default FORAGER_MONITOR_MIN_INTERVAL_SECONDS); "
        "one above interval_seconds is lowered to it.",
    )
    max_interval_seconds: Seconds | None = Field(
        None,
        description="Slowest adaptive interval (default FORAGER_MONITOR_MAX_INTERVAL_SECONDS); "
        "one below interval_seconds is raised to it. Must stay below "
        "FORAGER_MONITOR_DEGRADED_SECONDS.",
    )


class MonitorPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str | None
    url: str
    fetcher: FetcherName
    parser_name: str | None
    selector_type: Literal["css", "json"] | None
    selectors: dict[str, str] | None
    state_field: str | None
    end_states: list[str] | None
    last_state: str | None = Field(description="The state field's last value.")
    interval_seconds: float
    min_interval_seconds: float
    max_interval_seconds: float
    current_interval_seconds: float
    enabled: bool
    status: MonitorStatus = Field(
        description="paused (by an operator, or held by its domain's policy: see held_reason), "
        "stopped (no process runs it), active, "
        "stale (no successful poll for FORAGER_MONITOR_STALENESS_SECONDS) or error."
    )
    held_reason: str | None = Field(
        None,
        description="Why its domain's policy holds it back now (domain_inactive, robots, "
        "no_proxy, concurrency, crawl_delay: then words); null while it polls.",
    )
    health_status: HealthName
    running: bool = Field(description="A live process holds its lease.")
    scraper_id: str | None = Field(description="The current run (new on every restart).")
    run_started_at: datetime | None
    total_polls: int
    total_updates: int
    total_changes: int
    total_errors: int
    consecutive_errors: int
    restarts: int
    breaker_state: Literal["closed", "open", "half_open"]
    breaker_rejections: int
    last_success_at: datetime | None
    last_change_at: datetime | None
    last_error_at: datetime | None
    last_error: str | None
    last_latency_ms: int | None
    data_age_seconds: float | None = Field(description="Age of the last successful poll.")
    memory_mb: float | None = Field(
        description="Memory (RSS, MB) of the process tree running it, shared by every monitor "
        "that process runs: not this monitor's own (see process)."
    )
    process: str | None = Field(
        None, description="The process running it (its lease owner), while one does."
    )
    created_at: datetime
    updated_at: datetime


class DataMetadata(BaseModel):
    scraped_at: datetime = Field(description="The last successful poll that saw this data.")
    data_age_seconds: int
    changed_at: datetime = Field(description="When the data last changed to this.")
    scraper_id: str | None
    monitor_id: int
    source: str


class MonitorData(BaseModel):
    """The latest snapshot's fields, plus ``_metadata``."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    metadata: DataMetadata = Field(alias="_metadata")


class FieldChangePublic(BaseModel):
    """One field that differs from the snapshot before."""

    model_config = ConfigDict(from_attributes=True)

    field: str
    kind: Literal["added", "removed", "changed"]
    before: Any = Field(description="The value in the snapshot before (null when added).")
    after: Any = Field(description="The value now (null when removed).")


class SnapshotPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    observed_at: datetime
    data: dict[str, Any]
    scraper_id: str | None
    update_latency_ms: int | None
    changes: list[FieldChangePublic] = Field(
        default_factory=list,
        description="What differs from the snapshot before this one, field by field (the "
        "first snapshot: every field added).",
    )


class ScraperErrorPublic(BaseModel):
    """One error of a monitor's run (the seed's ``scraper_errors``)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    scraper_id: str
    monitor_id: int | None
    timestamp: datetime
    error_type: str = Field(description="Forager's error type (network, timeout, http_5xx …).")
    category: Literal["network", "parsing", "browser", "database", "auth"]
    error_message: str | None
    stack_trace: str | None
    url: str | None
    operation: str | None
    retry_attempt: int
    resolved: bool
    resolution_time: datetime | None
    resolution_method: Literal["auto_retry", "circuit_breaker", "manual", "restart"] | None
