"""What each version of an item changed: top-level fields added, removed or changed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forager.db.models import ItemVersion
from forager.items.records import PROVENANCE

_SHOWN = ("version", "data", "content_hash", *PROVENANCE, "recorded_at")


def changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[str]]:
    """The top-level fields ``new`` added, removed or changed against ``old`` (sorted)."""
    return {
        "added": sorted(new.keys() - old.keys()),
        "removed": sorted(old.keys() - new.keys()),
        "changed": sorted(k for k in new.keys() & old.keys() if new[k] != old[k]),
    }


def with_changes(newest_first: Sequence[ItemVersion]) -> list[dict[str, Any]]:
    """Each version as a dict with ``changes`` against the next older one in the list (None
    for version 1; the list's oldest, if not version 1, is only there to be compared with)."""
    shown: list[dict[str, Any]] = []
    for index, row in enumerate(newest_first):
        older = newest_first[index + 1] if index + 1 < len(newest_first) else None
        if older is None and row.version > 1:
            break  # read only to compare its successor with
        record = {name: getattr(row, name) for name in _SHOWN}
        record["changes"] = None if older is None else changes(older.data, row.data)
        shown.append(record)
    return shown
