"""Items on the wire: records that are not products (ads, listings), with their versions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

_DATA = {"title": "Mountain bike, 21 gears", "price": "350.00", "url": "https://shop.example/ad/1"}


class ItemPublic(BaseModel):
    """An item's current data and where it was last read."""

    id: int = Field(examples=[1])
    domain_id: int = Field(examples=[1])
    kind: str = Field(description="What the item is (the parser's name for it).", examples=["ad"])
    key: str = Field(
        description="Identifies the item among the domain's items of its kind: a recrawl "
        "that finds the same key updates it.",
        examples=["https://shop.example/ad/1"],
    )
    version: int = Field(description="1, then +1 each time the data changed.", examples=[2])
    data: dict[str, Any] = Field(description="The item's fields (JSON).", examples=[_DATA])
    content_hash: str = Field(description="SHA-256 of the data's canonical JSON.")
    url: str | None = Field(
        description="The page it was last read from.", examples=["https://shop.example/ads"]
    )
    crawl_task_id: int | None = Field(
        description="The task that last read it (null: deleted).", examples=[1]
    )
    parser_name: str = Field(examples=["selector"])
    parser_version: str = Field(examples=["2"])
    first_seen_at: datetime
    last_seen_at: datetime = Field(description="The last crawl that found it, changed or not.")
    changed_at: datetime = Field(description="When its data last changed (or first seen).")


class ItemChanges(BaseModel):
    """What a version changed in the data's top-level fields, against the version before."""

    added: list[str] = Field(examples=[["seller"]])
    removed: list[str] = Field(examples=[[]])
    changed: list[str] = Field(examples=[["price"]])


class ItemVersionPublic(BaseModel):
    """One version of an item's data, and what it changed."""

    version: int = Field(examples=[2])
    data: dict[str, Any] = Field(examples=[_DATA])
    content_hash: str
    changes: ItemChanges | None = Field(
        description="Fields added, removed or changed since the version before (null: the first)."
    )
    url: str | None = Field(examples=["https://shop.example/ads"])
    crawl_task_id: int | None = Field(examples=[1])
    parser_name: str = Field(examples=["selector"])
    parser_version: str = Field(examples=["2"])
    recorded_at: datetime


class ItemDetail(ItemPublic):
    """An item with its newest versions (newest first)."""

    versions: list[ItemVersionPublic]
    versions_total: int = Field(description="All its versions; /versions pages through them.")
