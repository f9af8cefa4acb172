"""Products' bodies: the public product with its price history and images, and its tags."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from forager.api.wire import MAX_JSON_ID, JsonBody, Tags


class ProductPublic(BaseModel):
    """The product record of DESIGN.md; prices are decimal strings."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    domain_id: int
    url: str
    product_name: str
    description: str | None
    price: Decimal | None
    currency: str | None
    original_price: Decimal | None
    rating: Decimal | None
    review_count: int | None
    availability: str | None
    is_available: bool | None
    brand: str | None
    category: str | None
    sku: str | None = Field(description="The shop's article number, as printed for shoppers.")
    gtin: str | None = Field(
        None, description="GTIN (EAN-8/13, UPC-A, GTIN-14), digits only; its check digit fits."
    )
    mpn: str | None = Field(None, description="The manufacturer's part number.")
    asin: str | None
    image_urls: list[str]
    parser_name: str
    parser_version: str
    field_confidence: dict[str, float] | None = Field(
        None, description="How sure the parser is of each filled field (0..1)."
    )
    quality_issues: list[str] | None = Field(
        None, description="Validation rules the record breaks (kept as extracted)."
    )
    content_hash: str
    last_crawled_at: datetime
    created_at: datetime
    updated_at: datetime
    tags: list[str] = Field(default_factory=list, description="The product URL's tags, sorted.")


class ProductUpdate(JsonBody):
    model_config = ConfigDict(extra="forbid")

    tags: Tags = Field(description="The product's tags from now on (the whole list).")


class ProductTagChange(JsonBody):
    """Tags added to and removed from many products at once."""

    model_config = ConfigDict(extra="forbid")

    product_ids: list[Annotated[int, Field(ge=1, le=MAX_JSON_ID)]] = Field(
        min_length=1, max_length=10_000
    )
    add: Tags = Field(default_factory=list)
    remove: Tags = Field(default_factory=list)


class ProductsTagged(BaseModel):
    updated: int = Field(description="Products found and changed.")
    product_ids: list[int]


class ProductImagePublic(BaseModel):
    """One image of a product and, on a domain with ``download_images``, its stored copy."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    image_url: str = Field(description="Where the shop serves it (as the parser found it).")
    position: int = Field(description="0 is the main image.")
    image_type: str = Field(description="primary (the main image) or gallery.")
    alt_text: str | None = Field(
        None, description="The image's alternative text; null: the parser does not read it."
    )
    stored: bool = Field(description="Forager holds a copy (served by content_url).")
    content_url: str | None = Field(
        None, description="This server's URL of the stored copy (authenticated like the API)."
    )
    content_hash: str | None = Field(None, description="SHA-256 of the stored bytes (hex).")
    content_type: str | None = Field(
        None, description="The type read from the bytes (image/png, image/jpeg, …)."
    )
    width: int | None = Field(None, description="Pixels, read from the file.")
    height: int | None = Field(None, description="Pixels, read from the file.")
    file_size: int | None = Field(None, description="Bytes stored.")
    fetched_at: datetime | None = Field(
        None, description="When it was stored, or its last failed try when not tried again."
    )
    fetch_attempts: int = Field(0, description="Downloads tried.")
    error: str | None = Field(
        None, description="Why the last try failed (not an image, too large, HTTP error …)."
    )


class PricePoint(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    price: Decimal | None
    original_price: Decimal | None
    currency: str | None
    availability: str | None
    is_available: bool | None
    recorded_at: datetime


class ProductDetail(ProductPublic):
    price_history: list[PricePoint] = Field(description="The newest price points, oldest first.")
    price_history_total: int = Field(
        description="All price points; page with /api/products/{id}/price-history."
    )
