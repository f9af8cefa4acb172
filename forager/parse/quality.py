"""Data quality of an extracted record: validation rules and per-field confidence.

Rules come from the seeds (local-worker-scraper "Validation Rules", crawler-architecture "Data
Quality & Validation"). A record that breaks one is kept as extracted, with its violations
listed; nothing is dropped or silently corrected here.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from forager.parse.base import EXTRACTED_FIELDS, ProductRecord

TITLE_MAX_CHARS = 500  # ScrapingResult.productTitle VarChar(500)
_MONEY_LIMIT = Decimal(10) ** 10  # Money columns keep 2 decimals and stay exact below this
_RECORD_URL = ("http://", "https://")

# Where a value was read, and how far that source is trusted.
Source = Literal[
    "markup",  # the shop's own product markup, known to this parser (Amazon's buy box)
    "heading",  # visible heading confirmed by structured data or og:title
    "json-ld",
    "microdata",
    "rdfa",
    "meta",  # OpenGraph / product meta tags
    "visible",  # a visible text found by a generic rule (struck price next to the price)
    "script",  # a shop's embedded JSON object
    "derived",  # implied by another field (in stock because there is a buy button)
    "url",  # implied by the URL (currency from the country TLD)
]
SOURCE_CONFIDENCE: dict[str, float] = {
    "markup": 0.95,
    "heading": 0.95,
    "json-ld": 0.9,
    "microdata": 0.85,
    "rdfa": 0.85,
    "meta": 0.75,
    "visible": 0.7,
    "script": 0.6,
    "derived": 0.6,
    "url": 0.5,
}
_SCORED_FIELDS = EXTRACTED_FIELDS


def confidence(record: ProductRecord, sources: dict[str, str]) -> dict[str, float]:
    """Confidence of every filled field from where it was read (unknown source: 0.5)."""
    scores: dict[str, float] = {}
    for name in _SCORED_FIELDS:
        value = getattr(record, name)
        if value is None or value == []:
            continue
        scores[name] = SOURCE_CONFIDENCE.get(sources.get(name, ""), 0.5)
    return scores


def _money_issue(name: str, value: Decimal | None) -> str | None:
    if value is None:
        return None
    if value <= 0:
        return f"{name} {value} is not positive"
    if value >= _MONEY_LIMIT:
        return f"{name} {value} is implausibly large"
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -2:
        return f"{name} {value} has more than 2 decimal places"
    return None


def validate(record: ProductRecord) -> list[str]:
    """The validation rules ``record`` breaks, each as one sentence (empty: all good)."""
    issues: list[str] = []
    title = record.product_name.strip()
    if not title:
        issues.append("product_name is empty")
    elif len(title) > TITLE_MAX_CHARS:
        issues.append(f"product_name is {len(title)} characters (at most {TITLE_MAX_CHARS})")
    for name in ("price", "original_price"):
        if (issue := _money_issue(name, getattr(record, name))) is not None:
            issues.append(issue)
    price, original = record.price, record.original_price
    if price is not None and original is not None and original < price:
        issues.append(f"original_price {original} is below price {price}")
    if original is not None and price is None:
        issues.append("original_price without a price")
    if record.rating is not None and not Decimal(0) <= record.rating <= Decimal(5):
        issues.append(f"rating {record.rating} is outside 0-5")
    if record.review_count is not None and record.review_count < 0:
        issues.append(f"review_count {record.review_count} is negative")
    if record.currency is not None and not (
        len(record.currency) == 3 and record.currency.isalpha() and record.currency.isupper()
    ):
        issues.append(f"currency {record.currency!r} is not an ISO 4217 code")
    if price is not None and record.currency is None:
        issues.append("price without a currency")
    bad_images = [url for url in record.image_urls if not url.startswith(_RECORD_URL)]
    if bad_images:
        issues.append(f"image URL {bad_images[0]!r} is not an absolute http(s) URL")
    if len(record.image_urls) != len(set(record.image_urls)):
        issues.append("image_urls has duplicates")
    return issues


def check(record: ProductRecord, sources: dict[str, str]) -> ProductRecord:
    """``record`` with its confidence and violations filled in (values untouched)."""
    record.field_confidence = confidence(record, sources)
    record.quality_issues = validate(record)
    return record
