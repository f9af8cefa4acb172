"""Stored items as records: one shape for the JSON API, the JSONL export and the CSV export."""

from __future__ import annotations

from typing import Any

from forager.db.models import Item

# Where an item (or a version of it) was read: the page, its task, the parser.
PROVENANCE = ("url", "crawl_task_id", "parser_name", "parser_version")
# The record's fields, in order (CSV columns: ``data`` as one canonical JSON cell).
ITEM_FIELDS = (
    "id",
    "domain_id",
    "kind",
    "key",
    "version",
    "data",
    "content_hash",
    *PROVENANCE,
    "first_seen_at",
    "last_seen_at",
    "changed_at",
)


def item_record(item: Item) -> dict[str, Any]:
    """The record of a stored item (timestamps as ISO 8601 text)."""
    record: dict[str, Any] = {
        name: getattr(item, "item_key" if name == "key" else name) for name in ITEM_FIELDS
    }
    for name in ("first_seen_at", "last_seen_at", "changed_at"):
        record[name] = record[name].isoformat()
    return record
