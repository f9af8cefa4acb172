"""The items package's tables (``forager.items``): records that are not products (issue 17,
migration 0020) and their versions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base
from forager.db.types import BigId, JsonDoc, UTCDateTime, utcnow


class Item(Base):
    """The current data of one item: a non-product record (an ad, a listing, a snapshot) a
    parser returned, identified by ``(domain, kind, key)`` so recrawls update it."""

    __tablename__ = "items"
    __table_args__ = (
        UniqueConstraint("domain_id", "kind", "item_key", name="uq_items_domain_kind_key"),
        # The item list's order (newest change first), read from the index alone.
        Index("ix_items_changed_at", "changed_at", "id"),
        Index("ix_items_kind_changed_at", "kind", "changed_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    domain_id: Mapped[int] = mapped_column(ForeignKey("domains.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(50))
    item_key: Mapped[str] = mapped_column(String(500))
    data: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    content_hash: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer, default=1)
    # Every text value of ``data``, lower-cased, for the list's text search.
    search_text: Mapped[str] = mapped_column(Text, default="")
    # Provenance of the latest observation: the task and its page URL (the stored page it read
    # is the task's; no key here, so page retention never leaves one dangling), the parser.
    crawl_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="SET NULL"), index=True
    )
    url: Mapped[str | None] = mapped_column(Text)
    parser_name: Mapped[str] = mapped_column(String(100))
    parser_version: Mapped[str] = mapped_column(String(50))
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    changed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Set by a trigger at each insert and data change: what feeds follow (migration 0033).
    change_seq: Mapped[int | None] = mapped_column(BigInteger, index=True)


class ItemVersion(Base):
    """One version of an item's data: written only when its canonical JSON changed."""

    __tablename__ = "item_versions"
    __table_args__ = (UniqueConstraint("item_id", "version", name="uq_item_versions_version"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    data: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    content_hash: Mapped[str] = mapped_column(String(64))
    crawl_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="SET NULL")
    )
    url: Mapped[str | None] = mapped_column(Text)
    parser_name: Mapped[str] = mapped_column(String(100))
    parser_version: Mapped[str] = mapped_column(String(50))
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
