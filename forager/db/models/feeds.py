"""The feeds package's tables (``forager.feeds``, issue 35, migration 0033): scheduled exports,
their runs, and the change counters their cursors follow.

A feed's cursor is a change sequence: ``products.change_seq`` and ``items.change_seq`` are set
by triggers on every insert and every update that changes the row's content (PostgreSQL: one
sequence per table; SQLite: ``feed_sequences``, a counter row per table, since writers
serialize there), and so is ``price_history.change_seq`` at insert. See forager/feeds/cursor.py
for why a cursor read this way misses nothing.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base, Timestamped
from forager.db.types import BigId, UTCDateTime, utcnow


class FeedSequence(Base):
    """SQLite only: the last change number given to a row of ``name`` (products, items)."""

    __tablename__ = "feed_sequences"

    name: Mapped[str] = mapped_column(String(30), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0)


class Feed(Timestamped, Base):
    """What is exported (``kind`` and its filters), in which format, where, how often; the
    cursor (the last change number exported) and the lease of the process running it."""

    __tablename__ = "feeds"
    __table_args__ = (
        CheckConstraint("kind IN ('products', 'items', 'price_changes')", name="ck_feeds_kind"),
        CheckConstraint("format IN ('jsonl', 'csv', 'parquet')", name="ck_feeds_format"),
        CheckConstraint("destination IN ('directory', 'store')", name="ck_feeds_destination"),
        Index("ix_feeds_due", "enabled", "next_run_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    kind: Mapped[str] = mapped_column(String(20))
    format: Mapped[str] = mapped_column(String(10))
    # Filters (NULL: any): a domain, a batch, a product tag, an item kind.
    domain: Mapped[str | None] = mapped_column(String(255))
    batch_name: Mapped[str | None] = mapped_column(String(255))
    tag: Mapped[str | None] = mapped_column(String(50))
    item_kind: Mapped[str | None] = mapped_column(String(50))
    destination: Mapped[str] = mapped_column(String(10))
    # directory: a folder under <data_dir>/feeds; store: a key prefix under feeds/ in the page
    # store (a directory or the S3 bucket).
    path: Mapped[str] = mapped_column(String(200), default="")
    interval_seconds: Mapped[int] = mapped_column(Integer)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    cursor: Mapped[int] = mapped_column(BigInteger, default=0)
    next_run_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    lease_owner: Mapped[str | None] = mapped_column(String(100))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class FeedRun(Base):
    """One run: the change numbers it covers (``from_seq`` exclusive, ``to_seq`` inclusive),
    the file it wrote, its rows; a run that failed or was cut off keeps its range and is done
    again, under the same file name, before the feed moves on."""

    __tablename__ = "feed_runs"
    __table_args__ = (
        CheckConstraint("status IN ('running', 'failed', 'succeeded')", name="ck_feed_runs_status"),
        Index("ix_feed_runs_feed", "feed_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    feed_id: Mapped[int] = mapped_column(ForeignKey("feeds.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(10), default="running")
    from_seq: Mapped[int] = mapped_column(BigInteger)
    to_seq: Mapped[int] = mapped_column(BigInteger)
    rows: Mapped[int | None] = mapped_column(Integer)
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    file: Mapped[str | None] = mapped_column(String(300))
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
