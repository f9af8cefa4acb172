"""The linear-time rewrites of issue 11 keep what the old regexes matched on ordinary text."""

from __future__ import annotations

import random
import re
from decimal import Decimal

import pytest

from forager.parse import signals, visible
from forager.parse.classify import classify, looks_like_product
from forager.parse.generic import _text, _without_site_suffix
from forager.parse.prices import parse_price, to_decimal
from forager.parse.signals import literal_trie


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Desk Lamp | Lumo Shop", "Desk Lamp"),
        ("Desk Lamp - Lumo", "Desk Lamp"),
        ("Desk Lamp — Lumo Shop", "Desk Lamp"),
        ("Desk Lamp – X", "Desk Lamp – X"),  # 1 character after the mark: not a site name
        ("Desk Lamp | " + "L" * 41, "Desk Lamp | " + "L" * 41),  # too long for a site name
        ("Wi-Fi Router", "Wi-Fi Router"),  # a hyphen inside a word is not a separator
        ("Lamp - Lumo - Shop", "Lamp - Lumo"),  # only the last part goes
        ("| Shop", "| Shop"),
        ("Lamp |", "Lamp |"),
    ],
)
def test_site_suffix(title: str, expected: str) -> None:
    assert _without_site_suffix(title) == expected


def test_tags_are_removed_from_structured_text() -> None:
    assert _text("Lamp <b>Pro</b> &lt;i&gt;X&lt;/i&gt;") == "Lamp Pro X"
    assert _text("a < b and c > d") == "a < b and c > d"
    assert _text("<<<") == "<<<"


def test_access_denied_and_product_markers() -> None:
    assert classify("<html><title lang='en'> Access Denied </title></html>") is not None
    assert classify("<title>Forbidden</title>") is not None
    assert classify("<title>Access denied? Read our policy</title>") is None
    assert looks_like_product('{"@type" : [ "Product"]}')
    assert looks_like_product('{"@type":"https://schema.org/Product"}')
    assert not looks_like_product('{"@type": "ProductGroupX"}')


def test_price_grouping_is_read_in_one_pass() -> None:
    assert parse_price("1 299 999,90 €", "fr") == Decimal("1299999.90")
    assert parse_price("173 34") == Decimal("173.34")
    assert parse_price("12 1234") == Decimal("12")
    assert parse_price("1" + " 111" * 100_000) == Decimal("1" + "111" * 100_000)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "Infinity", Decimal("NaN")])
def test_non_finite_numbers_are_no_price(value: object) -> None:
    assert to_decimal(value) is None


def _texts_around(words: tuple[str, ...], count: int, seed: int) -> list[str]:
    """Random texts over the words' own characters, half of them with a word (or most of
    one) put in, so matches, near misses and overlapping words all occur."""
    rnd = random.Random(seed)
    alphabet = "".join(sorted(set("".join(words)))) + " xq9"
    texts = []
    for _ in range(count):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 24)))
        if rnd.random() < 0.5:
            word = rnd.choice(words)
            word = word[: rnd.randint(1, len(word))] if rnd.random() < 0.3 else word
            at = rnd.randint(0, len(text))
            text = text[:at] + word + text[at:]
        texts.append(text)
    return texts


@pytest.mark.parametrize(
    "words",
    [
        signals.SOLD_OUT,
        ("sold", "sold out", "out", "out of stock", "o", "unavailable", "currently unavailable"),
        ("a.b", "a+b", "(x)", "[y]", "a", "ab"),  # characters that mean something to ``re``
    ],
)
def test_a_literal_trie_finds_what_the_longest_first_alternation_finds(
    words: tuple[str, ...],
) -> None:
    alternation = re.compile("|".join(map(re.escape, sorted(words, key=len, reverse=True))))
    trie = re.compile(literal_trie(words))
    for text in [*words, *_texts_around(words, 20_000, seed=len(words))]:
        old, new = alternation.search(text), trie.search(text)
        assert (old and old.span(), old and old.group(0)) == (
            new and new.span(),
            new and new.group(0),
        ), text


def test_the_letter_counts_of_price_texts() -> None:
    letters = re.compile(r"[^\W\d_]")
    rnd = random.Random(7)
    alphabet = "aZé²½_9 -.€$ßΩ١x\u0301"  # letters, digits of other scripts, marks, signs
    for _ in range(50_000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 14)))
        count = len(letters.findall(text))
        assert bool(visible._SIX_LETTERS.search(text)) == (count > 5), text
        assert bool(visible._FOUR_LETTERS.search(text)) == (count > 3), text
