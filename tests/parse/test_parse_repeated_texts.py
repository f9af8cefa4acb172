"""The buy box's stock and label tests keep their answer per text: the same answer each time."""

from __future__ import annotations

import pytest

from forager.parse import signals


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("SKU: LMP-4711", True),
        ("Art.-Nr.: 4711", True),
        ("EAN 4006381333931", True),
        ("Size 42", False),
    ],
)
def test_a_label_is_told_again_the_same(text: str, label: bool) -> None:
    for _ in range(2):  # the second answer is the one kept
        assert signals.starts_with_id_label(text) is label
        assert (signals.ANY_ID_LABEL.match(text) is not None) is label


@pytest.mark.parametrize(
    ("low", "stock"), [("sold out", True), ("in stock", True), ("free returns", False)]
)
def test_a_stock_word_is_told_again_the_same(low: str, stock: bool) -> None:
    for _ in range(2):
        assert signals.may_state_stock(low) is stock
