"""What changed between two snapshots of a monitor (``forager.monitors.diff``)."""

from __future__ import annotations

from forager.monitors.diff import FieldChange, changes


def test_changed_added_and_removed_fields_in_order() -> None:
    before = {"price": "194.05 EUR", "stock": "in stock", "seller": "A"}
    after = {"price": "189.90 EUR", "stock": "in stock", "rating": 4.5}
    assert changes(before, after) == [
        FieldChange("price", "changed", "194.05 EUR", "189.90 EUR"),
        FieldChange("rating", "added", None, 4.5),
        FieldChange("seller", "removed", "A", None),
    ]


def test_the_first_snapshot_adds_every_field_and_equal_ones_change_nothing() -> None:
    assert changes(None, {"home": 1, "away": 0}) == [
        FieldChange("home", "added", None, 1),
        FieldChange("away", "added", None, 0),
    ]
    assert changes({"home": 1, "away": [0, 1]}, {"away": [0, 1], "home": 1}) == []
