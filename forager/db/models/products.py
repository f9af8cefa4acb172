"""The products package's tables (``forager.products``): products, their images, tags and price
history."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from forager.db.models.base import Base, Timestamped
from forager.db.types import BigId, JsonDoc, Money, UTCDateTime, utcnow


class Product(Timestamped, Base):
    """The latest extracted record of one product URL (DESIGN.md "Product record")."""

    __tablename__ = "products"
    # Full-text search objects (SQLite FTS5 table, PostgreSQL GIN index) live in migration
    # 0002 only; see forager.products.search.
    # (updated_at, id): the product list's order, read from the index alone (migration 0010).
    __table_args__ = (
        Index("ix_products_updated_at", "updated_at", "id"),
        # The sorts' pages in index order, ties by id (0038); -price and -rating read them
        # backwards on SQLite, and on PostgreSQL (NULLs last) ix_products_price_desc and
        # ix_products_rating_desc, which migration 0038 creates.
        Index("ix_products_price", "price", "id"),
        Index("ix_products_rating", "rating", "id"),
        Index("ix_products_product_name", "product_name", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    domain_id: Mapped[int] = mapped_column(ForeignKey("domains.id", ondelete="CASCADE"), index=True)
    crawl_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="SET NULL")
    )
    url: Mapped[str] = mapped_column(Text)
    url_hash: Mapped[str] = mapped_column(String(64), unique=True)
    product_name: Mapped[str] = mapped_column(String(512))
    description: Mapped[str | None] = mapped_column(Text)
    price: Mapped[Decimal | None] = mapped_column(Money)
    currency: Mapped[str | None] = mapped_column(String(3))
    original_price: Mapped[Decimal | None] = mapped_column(Money)
    availability: Mapped[str | None] = mapped_column(String(255), index=True)
    is_available: Mapped[bool | None] = mapped_column(Boolean)
    rating: Mapped[Decimal | None] = mapped_column(Money)  # min_rating (0034), sorts (0038)
    review_count: Mapped[int | None] = mapped_column(Integer)
    brand: Mapped[str | None] = mapped_column(String(255), index=True)
    category: Mapped[str | None] = mapped_column(String(512), index=True)
    # The shop's article number as printed for shoppers; GTIN (EAN / UPC, check digit valid)
    # and manufacturer part number apart (migration 0024). sku and gtin are searched exactly.
    sku: Mapped[str | None] = mapped_column(String(100), index=True)
    gtin: Mapped[str | None] = mapped_column(String(14), index=True)
    mpn: Mapped[str | None] = mapped_column(String(100))
    asin: Mapped[str | None] = mapped_column(String(20), index=True)
    parser_name: Mapped[str] = mapped_column(String(100))
    parser_version: Mapped[str] = mapped_column(String(50))
    content_hash: Mapped[str] = mapped_column(String(64))
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", JsonDoc)
    # Data quality of the latest parse (migration 0005): field -> 0..1, and the validation
    # rules the record breaks (kept, never dropped or "fixed"; see forager.parse.quality).
    field_confidence: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    quality_issues: Mapped[list[Any] | None] = mapped_column(JsonDoc)
    last_crawled_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Set by a trigger at each insert and content change: what feeds follow (migration 0033).
    change_seq: Mapped[int | None] = mapped_column(BigInteger, index=True)

    images: Mapped[list[ProductImage]] = relationship(
        order_by="ProductImage.position", cascade="all, delete-orphan", lazy="raise"
    )


class ProductImage(Base):
    """One image URL of a product and, on domains with ``download_images``, its stored copy.

    The stored bytes are keyed by their SHA-256 (``image_path`` = ``images/ab/<sha256>.<ext>``),
    so products sharing an image share one object. Download state (migration 0019): not yet
    tried while ``fetched_at`` is null; ``fetch_after`` is both the lease of the worker
    downloading it and the back-off after a failure that may pass; ``error`` says why the last
    try failed (kept with ``fetched_at`` set when it will not be tried again).
    """

    __tablename__ = "product_images"
    __table_args__ = (
        # The image downloader's look-up: images not yet done, oldest first.
        Index(
            "ix_product_images_due",
            "id",
            postgresql_where=text("fetched_at IS NULL"),
            sqlite_where=text("fetched_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    product_id: Mapped[int] = mapped_column(
        ForeignKey("products.id", ondelete="CASCADE"), index=True
    )
    image_url: Mapped[str] = mapped_column(Text)
    image_path: Mapped[str | None] = mapped_column(String(512))
    alt_text: Mapped[str | None] = mapped_column(String(512))
    image_type: Mapped[str] = mapped_column(String(50), default="gallery")
    position: Mapped[int] = mapped_column(Integer, default=0)
    width: Mapped[int | None] = mapped_column(Integer)
    height: Mapped[int | None] = mapped_column(Integer)
    file_size: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    content_hash: Mapped[str | None] = mapped_column(String(64), index=True)
    content_type: Mapped[str | None] = mapped_column(String(50))
    fetched_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    fetch_after: Mapped[datetime | None] = mapped_column(UTCDateTime)
    fetch_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(Text)


# A tag: lowercase letters, digits and - _ . : (safe in a query string and a CSV cell).
TAG_PATTERN = r"^[a-z0-9][a-z0-9_.:-]{0,49}(?![\s\S])"


class ProductTag(Base):
    """A tag of a product URL (migration 0021): keyed by the URL's hash, so a URL submitted with
    tags has them before its product exists, and its product has them when it appears."""

    __tablename__ = "product_tags"
    __table_args__ = (Index("ix_product_tags_tag", "tag", "url_hash"),)

    url_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    tag: Mapped[str] = mapped_column(String(50), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class PriceHistory(Base):
    """A row each time a product's price, list price or availability changes."""

    __tablename__ = "price_history"
    __table_args__ = (Index("ix_price_history_product_time", "product_id", "recorded_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    product_id: Mapped[int] = mapped_column(ForeignKey("products.id", ondelete="CASCADE"))
    crawl_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="SET NULL")
    )
    price: Mapped[Decimal | None] = mapped_column(Money)
    original_price: Mapped[Decimal | None] = mapped_column(Money)
    currency: Mapped[str | None] = mapped_column(String(3))
    availability: Mapped[str | None] = mapped_column(String(255))
    is_available: Mapped[bool | None] = mapped_column(Boolean)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Set by a trigger at insert: what price-change feeds follow (migration 0033).
    change_seq: Mapped[int | None] = mapped_column(BigInteger, index=True)
