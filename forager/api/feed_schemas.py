"""Request and response bodies of the feeds API (issue 35, ``forager.feeds``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from forager.api.wire import Tag

KindName = Literal["products", "items", "price_changes"]
FormatName = Literal["jsonl", "csv", "parquet"]
DestinationName = Literal["directory", "store"]
RunStatus = Literal["running", "failed", "succeeded"]
_PATH_HELP = (
    "directory: a folder under <data_dir>/feeds; store: a prefix under feeds/ in the page "
    "store (its directory or S3 bucket). Segments of letters, digits, . _ - joined by /."
)


class FeedCreate(BaseModel):
    """A feed: what it exports (and its filters), the format, where to, how often."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, pattern=r"\S", examples=["kettles daily"])
    kind: KindName = Field(examples=["products"])
    format: FormatName = Field(examples=["parquet"])
    destination: DestinationName = Field(examples=["directory"])
    path: str = Field("", max_length=200, description=_PATH_HELP, examples=["daily/kettles"])
    interval_seconds: int = Field(3600, ge=60, le=31 * 86400, examples=[3600])
    enabled: bool = True
    domain: str | None = Field(None, max_length=255, description="Only this domain's rows.")
    batch_name: str | None = Field(
        None, max_length=255, description="Only rows whose latest task is of this batch."
    )
    tag: Tag | None = Field(None, description="Products (and their price changes) with this tag.")
    item_kind: str | None = Field(None, max_length=50, description="Items of this kind only.")


class FeedUpdate(BaseModel):
    """Fields to change; the cursor stays, so the next run starts where the last ended."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=100, pattern=r"\S")
    format: FormatName | None = None
    destination: DestinationName | None = None
    path: str | None = Field(None, max_length=200, description=_PATH_HELP)
    interval_seconds: int | None = Field(None, ge=60, le=31 * 86400)
    enabled: bool | None = None
    domain: str | None = Field(None, max_length=255)
    batch_name: str | None = Field(None, max_length=255)
    tag: Tag | None = None
    item_kind: str | None = Field(None, max_length=50)


class FeedPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    kind: KindName
    format: FormatName
    destination: DestinationName
    path: str
    interval_seconds: int
    enabled: bool
    domain: str | None
    batch_name: str | None
    tag: str | None
    item_kind: str | None
    cursor: int = Field(description="The last change number exported.")
    next_run_at: datetime
    lease_owner: str | None = Field(description="The process running it now, if any.")
    created_at: datetime
    updated_at: datetime


class FeedRunPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    feed_id: int
    status: RunStatus
    from_seq: int = Field(description="Change numbers after this one …")
    to_seq: int = Field(description="… up to this one are the run's rows.")
    rows: int | None
    bytes: int | None
    file: str | None = Field(
        description="The file written (under the feeds directory, or the store key); none "
        "when there was nothing new."
    )
    attempts: int
    error: str | None = Field(description="Why the last try failed; it is tried again.")
    started_at: datetime
    finished_at: datetime | None
