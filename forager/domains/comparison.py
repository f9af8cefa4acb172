"""A candidate selector map against the domain's current parser on the same stored pages,
field by field: what it adds, changes and loses (docs/PARSERS.md "Before saving")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from forager.parse.base import EXTRACTED_FIELDS

Verdict = Literal["added", "changed", "lost", "same"]
MAX_PAGES = 20  # the newest stored pages a map is compared on


@dataclass(frozen=True, slots=True)
class FieldDiff:
    """One field of one page: its value by the current parser and by the candidate."""

    field: str
    current: Any
    candidate: Any
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class PageComparison:
    """One stored page read by both parsers (an error: why one read no product)."""

    task_id: int
    url: str
    current_error: str | None
    candidate_error: str | None
    fields: list[FieldDiff]


@dataclass(frozen=True, slots=True)
class FieldSummary:
    """How many pages the candidate adds, changes, loses or keeps the field on."""

    field: str
    added: int = 0
    changed: int = 0
    lost: int = 0
    same: int = 0


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == []


def verdict(current: Any, candidate: Any) -> Verdict | None:
    """What the candidate does to a field's value (None: neither has one)."""
    if _empty(current):
        return None if _empty(candidate) else "added"
    if _empty(candidate):
        return "lost"
    return "same" if current == candidate else "changed"


def compare_page(
    task_id: int,
    url: str,
    current: tuple[dict[str, Any] | None, str | None],
    candidate: tuple[dict[str, Any] | None, str | None],
) -> PageComparison:
    """The fields either parser filled on the page (records as JSON, or None and an error)."""
    (before, before_error), (after, after_error) = current, candidate
    diffs: list[FieldDiff] = []
    for name in EXTRACTED_FIELDS:
        old = (before or {}).get(name)
        new = (after or {}).get(name)
        found = verdict(old, new)
        if found is not None:
            diffs.append(FieldDiff(name, old, new, found))
    return PageComparison(task_id, url, before_error, after_error, diffs)


def summarize(pages: list[PageComparison]) -> list[FieldSummary]:
    """Per field either parser filled on some page, in record order: the pages of each verdict."""
    counts: dict[str, dict[str, int]] = {}
    for compared in pages:
        for diff in compared.fields:
            tally = counts.setdefault(diff.field, {})
            tally[diff.verdict] = tally.get(diff.verdict, 0) + 1
    return [FieldSummary(name, **counts[name]) for name in EXTRACTED_FIELDS if name in counts]
