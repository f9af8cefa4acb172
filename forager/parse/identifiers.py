"""Global trade item numbers (GTIN-8/12/13/14: EAN, UPC, JAN, ISBN-13) checked by their digit.

A shop's own article number and a GTIN are different things: a shopper quotes the article
number ("Art.-Nr. 1002/710"), a GTIN names the product in every shop. ``gtin`` tells them
apart by the GS1 check digit, so a number of the right length whose last digit does not fit
is not taken for one.
"""

from __future__ import annotations

_LENGTHS = frozenset({8, 12, 13, 14})
_SEPARATORS = str.maketrans("", "", " -\u00a0")


def gtin(value: object) -> str | None:
    """``value`` as a GTIN (digits only, separators dropped) when its GS1 check digit fits."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return None
    digits = value.strip().translate(_SEPARATORS)
    if len(digits) not in _LENGTHS or not digits.isascii() or not digits.isdigit():
        return None
    if len(set(digits)) == 1:
        return None  # "00000000": a placeholder, though its check digit fits
    return digits if _check_digit(digits[:-1]) == int(digits[-1]) else None


def _check_digit(body: str) -> int:
    """GS1: from the right, weights 3, 1, 3, 1 …; the digit that makes the sum a multiple of 10."""
    total = sum(int(d) * (3 if i % 2 == 0 else 1) for i, d in enumerate(reversed(body)))
    return (10 - total % 10) % 10
