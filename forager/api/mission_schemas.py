"""Request and response bodies of the missions API: missions, the orchestrator's control,
worker services and writers (their API keys write-only: ``api_key_set`` on the way out)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic.config import JsonDict

from forager.api.wire import (
    END,
    HOST,
    HTTP,
    MAX_JSON_ID,
    SITE_URL,
    Day,
    JsonBody,
    Shape,
    without_null,
)
from forager.missions.dataurl import storage_base

MediaType = Literal["all", "video", "image"]
Language = Literal["pt", "en", "es", "fr", "de", "it"]  # forager.missions.states.LANGUAGES
MissionStatusName = Literal["draft", "queued", "running", "completed", "failed", "canceled"]
CheckpointName = Literal["atribuido", "extracao", "armazenamento", "finalizado"]
WorkerStatusName = Literal["idle", "initializing", "ready", "scraping", "error"]


def _service_url(value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("an http:// or https:// URL with a host")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("no credentials (use api_key), query or fragment")
    try:
        _ = parts.port
    except ValueError as exc:
        raise ValueError("the port must be a number from 1 to 65535") from exc
    return value.strip().rstrip("/")


def _storage(value: str) -> str:
    storage_base(value)  # raises ValueError with the reason
    return value.strip()


def _storage_reason(value: str) -> str | None:
    try:
        storage_base(value)
    except ValueError as exc:
        return str(exc)
    return None


# The schema says what the validators accept, so a client (or a fuzzer) reading it sends only
# what passes: an http(s) URL without credentials, query or fragment; a storage domain of a
# host, optional port and plain path segments (never "." or "..").
_SEGMENT = rf"/+(?!\.\.?(?:/|{END}))[A-Za-z0-9._~-]+"
STORAGE = rf"^\s*(?:{HTTP})?{HOST}(?::[0-9]{{1,5}})?(?:{_SEGMENT})*/*\s*{END}"
ServiceURL = Annotated[
    str,
    Shape(SITE_URL, "an http:// or https:// URL with a host, without credentials or query", 500),
    Field(examples=["http://10.0.0.5:8081"]),
    AfterValidator(_service_url),
]
StorageDomain = Annotated[
    str,
    Shape(STORAGE, "a host, optional port and path", 255, explain=_storage_reason),
    Field(examples=["storage.example.com"]),
    AfterValidator(_storage),
]
# Sent as the ``x-api-key`` header: printable ASCII (spaces only inside), as HTTP carries it.
_HEADER_VALUE = rf"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?{END}"
_SECRET: JsonDict = {"format": "password", "writeOnly": True}
ApiKey = Annotated[
    SecretStr,
    Shape(_HEADER_VALUE, "printable ASCII, sent as the x-api-key header", 200),
    Field(json_schema_extra=_SECRET),
]
Name = Annotated[str, Field(min_length=1, max_length=100, examples=["worker-sp-1"])]


# -- missions ------------------------------------------------------------------------------


class MissionCreate(JsonBody):
    """One mission for the range, or (``split_by_day``) one per day of it."""

    date_start: Day
    date_end: Day = Field(
        description="On or after date_start, the range spanning at most "
        "FORAGER_MISSION_MAX_SPAN_DAYS days: a range that runs backwards or longer is refused "
        "(422 naming date_end)."
    )
    media_type: MediaType = "all"
    languages: list[Language] = Field(min_length=1, max_length=6, examples=[["pt", "en"]])
    split_by_day: bool = Field(False, description="One mission per day of the range.")
    queue: bool = Field(False, description="Queue them at once (else they are drafts).")


class MissionPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    date_start: date
    date_end: date
    media_type: MediaType
    languages: list[str]
    status: MissionStatusName
    checkpoint: CheckpointName | None
    worker_id: int | None
    worker_job_id: str | None
    worker_data_url: str | None
    proxy_used: str | None = Field(description="Name of the proxy of the session that ran it.")
    writer_id: int | None
    writer_job_id: str | None
    ads_count: int | None
    error_code: str | None = Field(examples=[None])
    error_message: str | None
    retry_count: int
    created_at: datetime
    queued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


class MissionsCreated(BaseModel):
    missions: list[MissionPublic]


class QueueRequest(JsonBody):
    mission_ids: list[Annotated[int, Field(ge=1, le=MAX_JSON_ID)]] = Field(
        min_length=1, max_length=1000, examples=[[42, 43]]
    )


class Refusal(BaseModel):
    id: int
    current_status: str = Field(description="Why not: its status now (or `missing`).")


class QueueResult(BaseModel):
    queued: list[int]
    refused: list[Refusal]


class TimelineEvent(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    entity_type: str = Field(examples=["mission"])
    entity_id: str = Field(examples=["42"])
    event: str = Field(examples=["mission_queued"])
    details: dict[str, Any] | None
    created_at: datetime


class FailurePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    status: str
    error_code: str | None
    error_message: str | None
    retry_count: int
    failed_at: datetime
    details: dict[str, Any] | None


class WorkerPerformancePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    worker_id: int
    worker_name: str
    completed_count: int
    failed_count: int
    avg_duration_ms: float | None


class ProxyTroublePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    proxy_id: int
    name: str
    host: str
    failure_count: int
    is_active: bool
    session_failures: int
    rotations: int


# -- control -------------------------------------------------------------------------------


class MissionSettings(BaseModel):
    """The orchestrator's settings: set from the dashboard, shared by every process."""

    model_config = ConfigDict(from_attributes=True)

    session_limit: int = Field(ge=1, le=1000, description="Missions per session.")
    max_retries: int = Field(ge=0, le=20, description="Retries before a mission fails.")


class MissionSettingsUpdate(JsonBody):
    session_limit: int | None = Field(None, ge=1, le=1000, examples=[5])
    max_retries: int | None = Field(None, ge=0, le=20, examples=[2])


# -- worker services and writers ---------------------------------------------------------------


class WriterCreate(JsonBody):
    """A writer (it stores what a worker service scraped); ``api_key`` is encrypted at rest
    and never shown again."""

    name: Name
    url: ServiceURL
    api_key: ApiKey
    active: bool = True

    def columns(self) -> dict[str, Any]:
        """Column values, the key in plain text (for the registry to encrypt)."""
        return {**self.model_dump(), "api_key": self.api_key.get_secret_value()}


class WorkerServiceCreate(WriterCreate):
    """A worker service (it scrapes missions); ``api_key`` is encrypted at rest and never
    shown again."""

    storage_domain: StorageDomain | None = Field(
        None, description="Where its results are served: host[/prefix] (HTTPS) or a full URL."
    )


class WriterUpdate(JsonBody):
    """Fields to change; a new ``api_key`` replaces the old one."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra=without_null("name", "url", "api_key", "active")
    )

    name: Name | None = None
    url: ServiceURL | None = None
    api_key: ApiKey | None = Field(None, json_schema_extra=_SECRET)
    active: bool | None = None

    @model_validator(mode="after")
    def _required_stay_set(self) -> WriterUpdate:
        for name in ("name", "url", "api_key", "active"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null")
        return self

    def changes(self) -> dict[str, Any]:
        """The fields sent, the key in plain text."""
        values = self.model_dump(exclude_unset=True)
        if self.api_key is not None:
            values["api_key"] = self.api_key.get_secret_value()
        return values


class WorkerServiceUpdate(WriterUpdate):
    storage_domain: StorageDomain | None = None


class WriterPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    url: str
    api_key_set: bool = Field(True, description="The key itself is never returned.")
    active: bool
    last_test_at: datetime | None
    last_test_ok: bool | None
    created_at: datetime
    updated_at: datetime


class WorkerServicePublic(WriterPublic):
    storage_domain: str | None
    status: WorkerStatusName
    session_count: int
    current_mission_id: int | None
    proxy_name: str | None = Field(None, description="The proxy its session holds now.")
    session_started_at: datetime | None
    last_error_code: str | None
    last_error_at: datetime | None


class ConnectionTestResult(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    ok: bool
    detail: str = Field(examples=["reachable, API key accepted; session: ready"])


class OrchestratorStatus(BaseModel):
    """Mission Control at a glance: the run, the settings, the queue, every worker service."""

    run_requested: bool = Field(description="Started (Iniciar) and not finished or stopped.")
    running: bool = Field(description="A process holds the loop's lease now.")
    leader_id: str | None
    leader_expires_at: datetime | None
    run_started_at: datetime | None
    run_ended_at: datetime | None
    session_limit: int
    max_retries: int
    missions_by_status: dict[str, int] = Field(examples=[{"queued": 12, "running": 2}])
    workers: list[WorkerServicePublic]
