"""What changed between two of a monitor's snapshots, field by field (issue 34): the diff the
history shows, as changedetection.io shows what changed between two checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class FieldChange:
    field: str
    kind: Literal["added", "removed", "changed"]
    before: Any
    after: Any


def changes(before: dict[str, Any] | None, after: dict[str, Any]) -> list[FieldChange]:
    """The fields that differ from ``before`` (None: the first snapshot, every field added),
    in ``after``'s field order, then the removed ones."""
    old = before or {}
    found = [
        FieldChange(name, "added", None, value)
        if name not in old
        else FieldChange(name, "changed", old[name], value)
        for name, value in after.items()
        if name not in old or old[name] != value
    ]
    found += [
        FieldChange(name, "removed", value, None)
        for name, value in old.items()
        if name not in after
    ]
    return found
