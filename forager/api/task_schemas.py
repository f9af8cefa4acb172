"""Crawl tasks' bodies: submit one or a batch (and each URL's result), the public task with its
attempts and events, restarts, recrawl settings and the task stats."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from forager.api.event_schemas import EventPublic
from forager.api.profile_schemas import TaskRequestIn, TaskRequestPublic, shown_request
from forager.api.wire import (
    MAX_JSON_ID,
    CrawlURL,
    JsonBody,
    Tags,
    Timestamp,
    VersionText,
    choice_of,
)
from forager.parse.registry import parser_names
from forager.queue.door import SubmitSpec


def _known_parser(name: str | None) -> str | None:
    if name is not None and name not in parser_names():
        raise ValueError(f"unknown parser {name!r} (known: {', '.join(parser_names())})")
    return name


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
        return _known_parser(name)

    def spec(self, url: str, created_by: str) -> SubmitSpec:
        """The submit path's request for ``url`` with these options (API and ``forager
        submit`` alike): each option goes to the SubmitSpec field of its name."""
        options = {name: getattr(self, name) for name in TaskOptions.model_fields}
        options["tags"] = tuple(dict.fromkeys(self.tags))
        return SubmitSpec(url=url, created_by=created_by, **options)


RESTART_FIELD = Field(
    False,
    description="Crawl again: a URL already known whose task has finished (completed, failed "
    "or cancelled) is restarted with this submission's priority and scheduled_at.",
)


class TaskCreate(TaskOptions):
    url: CrawlURL = Field(examples=["https://www.amazon.com.br/dp/B0ABC12345"])
    restart: bool = RESTART_FIELD
    request: TaskRequestIn | None = Field(
        None,
        description="A request beyond a bare GET: method POST with a JSON or form body, and "
        "headers, cookies and a user agent over the domain's request profile (secret values "
        "stored encrypted, never shown). Part of the task's identity (its url_hash).",
    )
    webhook_url: CrawlURL | None = Field(
        None,
        description="Completion webhook (seed 004): the task's products POSTed each time it "
        "completes, through the alerts outbox (signed with webhook_secret if given). Refused "
        "(422) where the egress policy forbids it.",
        examples=[None],
    )
    webhook_secret: str | None = Field(
        None,
        min_length=16,
        max_length=200,
        description="Signs the completion webhook (X-Forager-Signature, docs/ALERTS.md); stored "
        "encrypted, never shown.",
        examples=[None],
    )


class BatchURL(JsonBody):
    """One URL of a batch with options of its own; those it leaves out are the batch's."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(examples=["https://www.amazon.com.br/dp/B0ABC12345"])
    priority: int | None = Field(None, ge=1, le=10, description="1 highest, 10 lowest.")
    scheduled_at: Timestamp | None = Field(None, description="Not before this time.")
    is_recurring: bool | None = Field(None, description="Recrawl every crawl_frequency_seconds.")
    crawl_frequency_seconds: int | None = Field(None, ge=60, le=31_536_000)
    max_retries: int | None = Field(None, ge=0, le=100)
    parser_name: str | None = Field(None, json_schema_extra=choice_of(parser_names))
    tags: Tags = Field(
        default_factory=list, description="Tags of this URL's product, added to the batch's."
    )
    request: TaskRequestIn | None = Field(
        None, description="This URL's own request (as a single task's request)."
    )

    @field_validator("parser_name")
    @classmethod
    def _known_parser(cls, name: str | None) -> str | None:
        return _known_parser(name)

    @model_validator(mode="before")
    @classmethod
    def _bare_url(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"url": data}
        if not isinstance(data, dict | BatchURL):
            raise ValueError("a URL, or an object with the url and its own options")
        return data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # A bare string is a URL with the batch's options: say so in the description.
        options = handler.resolve_ref_schema(handler(core_schema))
        bare = {"type": "string", "description": "A URL with the batch's options."}
        return {"anyOf": [bare, options]}

    def overrides(self) -> dict[str, Any]:
        """The options this URL sets (null: the batch's; tags and request are merged by the
        caller)."""
        return self.model_dump(
            exclude_unset=True, exclude_none=True, exclude={"url", "tags", "request"}
        )


class TaskBatchCreate(TaskOptions):
    urls: list[BatchURL] = Field(
        min_length=1,
        max_length=10_000,
        description="URLs, each a string (the batch's options) or an object with options of "
        "its own (priority, schedule, tags, request); mixed freely.",
    )
    restart: bool = RESTART_FIELD
    webhook_url: CrawlURL | None = Field(
        None,
        description="Completion webhook (seed 004; needs batch_name): the batch's products "
        "POSTed once none of its tasks is left to run, through the alerts outbox (signed with "
        "webhook_secret if given). Refused (422) where the egress policy forbids it.",
        examples=[None],
    )
    webhook_secret: str | None = Field(
        None,
        min_length=16,
        max_length=200,
        description="Signs the completion webhook (X-Forager-Signature, docs/ALERTS.md); stored "
        "encrypted, never shown.",
        examples=[None],
    )


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
    fetch_request: TaskRequestPublic | None = Field(
        None,
        description="The task's own request (method, body, profile without secret values); "
        "null for a GET with the domain's profile.",
    )

    @field_validator("fetch_request", mode="before")
    @classmethod
    def _no_secret(cls, value: Any) -> Any:
        # The stored form holds sealed values and the identity key: only the public view goes.
        return shown_request(value) if isinstance(value, dict) else value

    batch_name: str | None
    created_by: str
    lease_owner: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime


class TaskRestart(JsonBody):
    """Options of a restart; all optional."""

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
    """Which failed tasks to restart in bulk."""

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
    model_config = ConfigDict(from_attributes=True)

    status: str
    count: int
    avg_duration_seconds: float | None = Field(
        description="Mean of completed_at - started_at where both are set."
    )


class TaskStats(BaseModel):
    since: datetime
    statuses: list[StatusStats]


class SubmitResult(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    input_url: str
    result: Literal["created", "duplicate", "invalid"]
    task_id: int | None = None
    url: str | None = None
    status: str | None = None
    error: str | None = None
    hint: str | None = Field(
        None,
        description="On a duplicate: the known task's status, which options of this submission "
        "were not applied, and how to crawl it again (or that it was restarted).",
    )


class TaskSubmitted(BaseModel):
    result: Literal["created", "duplicate"]
    task: TaskPublic
    hint: str | None = Field(None, description="On a duplicate: as in a batch's results.")


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


class TaskDetail(TaskPublic):
    error_trace: str | None = Field(
        None,
        description="The stack trace of an `internal` failure (up to 16,000 characters: its "
        "head and tail), shown to admin keys only: always null for a read-only key.",
    )
    attempts: list[AttemptPublic] = Field(description="The newest attempts, oldest first.")
    attempts_total: int = Field(description="All attempts; page with /api/tasks/{id}/attempts.")
    events: list[EventPublic] = Field(description="The newest events, oldest first.")
    events_total: int = Field(description="All events; page with /api/tasks/{id}/events.")
