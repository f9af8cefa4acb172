"""Exact ``Decimal`` prices from shop text in any common locale, plus currency detection.

Symbols, countries' currencies and decimal marks come from CLDR (``forager.parse.locales``).
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from urllib.parse import urlsplit

from forager.parse import locales

# A run of digits with the separators shops put inside numbers (incl. NBSP / narrow NBSP / ').
_NUMBER = re.compile(r"\d(?:[\d.,'’\u00a0\u202f\u2009 ]*\d)?")
_GROUPS = re.compile(r"\d+|[^\d]+")
_PLAIN = re.compile(r"-?\d+(?:\.\d+)?")
_THOUSANDS_ONLY = re.compile(r"\d{1,3}\.\d{3}")  # "1.299": a thousands mark, not a decimal
_THOUSANDS = re.compile(r"\d{1,3}(?:\.\d{3})+")
_SCIENTIFIC = re.compile(r"-?\d+(?:\.\d+)?[eE][+-]?\d{1,4}")
_SPACES = "\u00a0\u202f\u2009 "

# Digits of other scripts (Arabic-Indic, Persian, Devanagari, Thai, full-width ...) and the
# Arabic decimal / thousands marks, as the ASCII ones: "٣٬٤٩٩٫٠٠" is "3,499.00".
_DIGITS = {
    **{ord(c): str(unicodedata.digit(c)) for c in map(chr, range(0x660, 0x10000)) if c.isdecimal()},
    0x066B: ".",
    0x066C: ",",
    0xFF0C: ",",
    0xFF0E: ".",
}
# ``\b[A-Z]{3}\b`` (an upper-case code), written to start with the letter class so that ``re``
# skips ahead to capitals instead of trying the word boundary at every character.
UPPER_CODE = re.compile(r"[A-Z](?<!\w[A-Z])[A-Z]{2}(?!\w)")
# "Rs 23,450" / "Rs. 999" / "₨": rupees, whose country the TLD says (India when it does not).
_RUPEE_SIGNS = frozenset({"Rs", "₨"})
_RUPEES = frozenset({"INR", "PKR", "LKR", "NPR", "MUR", "SCR"})
# The ASCII characters a CLDR symbol or unit word may start with ("$", "R$", "kr", "zł", "lei").
_ASCII_SYMBOL_START = re.compile(r"[$A-Za-z]")
_LETTER = re.compile(r"[^\W\d_]")
_MARKS = str.maketrans("", "", "\u200e\u200f\u061c")


def _comma_is_decimal(locale_hint: str | None) -> bool | None:
    """True/False when the locale fixes the decimal mark (CLDR), None when unknown."""
    if not locale_hint:
        return None
    return locales.comma_is_decimal(locale_hint)


def ascii_digits(text: str) -> str:
    """``text`` with digits of any script and the Arabic separators as ASCII ones."""
    return text if text.isascii() else text.translate(_DIGITS)


def _from_groups(groups: list[str], separators: list[str], comma_decimal: bool | None) -> str:
    """Rebuild a plain ``1234.56`` string from digit groups and the separators between them."""
    if not separators:
        return groups[0]
    last_sep, last_group = separators[-1], groups[-1]
    marks = {s for s in separators if s in ".,"}
    decimal_at: int | None = None
    if last_sep in _SPACES or last_sep in "'’":
        # "173 34" (superscript cents) has a 2-digit tail; "2 480" is a thousands group.
        if last_sep in _SPACES and len(last_group) == 2 and len(separators) == 1:
            decimal_at = len(separators) - 1
    elif len(marks) == 2:
        decimal_at = len(separators) - 1  # "1.299,90" / "1,299.90": the last mark is decimal
    elif separators.count(last_sep) > 1:
        decimal_at = None  # "1.299.000" / "1,299,000": repeated mark means thousands
    elif len(last_group) != 3:
        decimal_at = len(separators) - 1  # "12,5" / "1299.9"
    elif comma_decimal is not None:
        decimal_at = len(separators) - 1 if (last_sep == ",") == comma_decimal else None
    # else: a lone mark before exactly 3 digits ("24.990", "1,299") is a thousands mark.
    head = "".join(groups[: decimal_at + 1]) if decimal_at is not None else "".join(groups)
    if decimal_at is None:
        return head
    return head + "." + "".join(groups[decimal_at + 1 :])


def _space_continues(groups: list[str], index: int, grouped: bool) -> bool:
    """Whether a space after ``groups[index]`` is inside the number (thousands or "173 34").

    ``grouped``: every group from the second up to ``index`` has 3 digits (the caller keeps it,
    so a long run of "111 111 ..." is read in one pass).
    """
    if index + 1 >= len(groups) or len(groups[0]) > 3 or not grouped:
        return False
    nxt = len(groups[index + 1])
    return nxt == 3 or (index == 0 and nxt == 2 and len(groups) == 2)


def parse_price(
    text: str, locale_hint: str | None = None, currency: str | None = None
) -> Decimal | None:
    """The first price in ``text`` as an exact Decimal ("R$ 1.299,90" -> 1299.90), else None.

    ``locale_hint`` (a language tag) fixes the decimal mark by CLDR; ``currency`` without minor
    units (CLP, KRW, JPY …) makes a lone mark before three digits a thousands mark ("$5.000" in
    Chile is five thousand) whatever the language says. Digits of any script count.
    """
    if not text:
        return None
    text = ascii_digits(text)
    stripped = text.strip()
    if _PLAIN.fullmatch(stripped) and not _THOUSANDS_ONLY.fullmatch(stripped):
        return Decimal(stripped)
    match = _NUMBER.search(text)
    if match is None:
        return None
    number = match.group(0)
    if number.isdigit():  # no separator inside: the digits are the amount, in any locale
        return Decimal(number)
    parts = _GROUPS.findall(number)
    groups = [p for p in parts if p[0].isdigit()]
    separators: list[str] = []
    grouped = True  # groups[1 : len(separators) + 1] all have 3 digits
    for sep in parts[1::2]:
        mark = sep.strip(_SPACES)
        if len(set(mark)) > 1:
            break  # "1.,2" is two numbers (or junk): keep the groups before it
        index = len(separators)
        grouped = grouped and (index == 0 or len(groups[index]) == 3)
        # " , " (text joined from split price spans) is a comma; pure whitespace is a space.
        if not mark and not _space_continues(groups, index, grouped):
            break  # "48.99 12": the space ends the number
        separators.append(mark[0] if mark else " ")
    groups = groups[: len(separators) + 1]
    comma_decimal = _comma_is_decimal(locale_hint)
    if currency is not None and len(groups[-1]) == 3 and _whole_units(currency):
        comma_decimal = separators[-1] == "."  # the lone mark cannot be a decimal one
    plain = _from_groups(groups, separators, comma_decimal)
    try:
        return Decimal(plain)
    except InvalidOperation:
        return None


def _whole_units(currency: str) -> bool:
    """Whether the currency has no minor units (CLDR precision 0: CLP, KRW, JPY, HUF ...)."""
    return len(currency) == 3 and currency.isalpha() and locales.minor_digits(currency) == 0


def to_decimal(value: object, currency: str | None = None) -> Decimal | None:
    """A structured-data number (Decimal, int, "1299.9", "1.299,90") as Decimal; floats via repr.

    NaN and infinities (JSON-LD may hold them: Python's JSON decoder accepts them) are None.
    A text "5.000" in a currency without minor units (``currency`` CLP) is five thousand.
    """
    text = value.strip() if isinstance(value, str) else ""
    if currency is not None and _THOUSANDS.fullmatch(text) and _whole_units(currency):
        return Decimal(text.replace(".", ""))
    number = _to_decimal(value)
    return number if number is None or number.is_finite() else None


def _to_decimal(value: object) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, Decimal):
        # More digits than a double holds: a float printed in full (4.83040000000000002700...);
        # its shortest round-trip text is what the shop meant.
        if len(value.as_tuple().digits) > 17:
            return Decimal(repr(float(value)))
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))  # shortest round-trip text, never the binary expansion
    if isinstance(value, str):
        text = value.strip()
        if _PLAIN.fullmatch(text):
            return Decimal(text)  # structured data uses "." as the decimal mark
        if _SCIENTIFIC.fullmatch(text):
            return Decimal(text)  # "1.5e3": kept as written; validation flags absurd values
        return parse_price(text)
    return None


@lru_cache(maxsize=256)
def _tld(url: str | None) -> str | None:
    if not url:
        return None
    host = (urlsplit(url).hostname or "").rstrip(".")
    if not host or host.replace(".", "").isdigit() or host == "localhost":
        return None
    return host.rsplit(".", 1)[-1]


def currency_for_url(url: str | None) -> str | None:
    """The currency a shop's country TLD implies (CLDR: amazon.co.uk -> GBP), else None; a
    ``.com`` shop is taken for a US one."""
    tld = _tld(url)
    if tld == "com":
        return "USD"
    territory = locales.territory_of_tld(tld)
    return locales.territory_currency(territory) if territory else None


def detect_currency(text: str | None, url: str | None = None) -> str | None:
    """ISO 4217 code from a price text's code or symbol (CLDR's, any script); a symbol that
    several currencies write ("$", "¥", "kr") is resolved by the URL's country TLD."""
    if not text:
        return None
    tld = _tld(url) if url else None
    if len(text) <= _CACHED_CHARS:  # the same short texts recur on a shop's pages
        return _short_currency(text, tld)
    return _currency(text, tld)


def _currency(text: str, tld: str | None) -> str | None:
    """``detect_currency`` for a text on a site of ``tld``."""
    for match in UPPER_CODE.finditer(text):
        if locales.is_currency_code(match.group(0)):
            return match.group(0)
    if text.isascii() and not _ASCII_SYMBOL_START.search(text):
        return None  # no sign and no letter a symbol starts with: the common "12.99" case
    if not text.isascii():
        text = text.translate(_MARKS)
    for match in locales.symbol_pattern().finditer(text):
        symbol = match.group(0)
        before = match.start() > 0 and _LETTER.match(text, match.start() - 1)
        if locales.cased(symbol) and (before or _LETTER.match(text, match.end())):
            continue  # inside a word: "Rs" in "Mrs", "kr" in "krém"
        territory = locales.territory_of_tld(tld) if tld else None
        if symbol.rstrip(".") in _RUPEE_SIGNS:
            local = locales.territory_currency(territory) if territory else None
            return local if local in _RUPEES else "INR"
        code = locales.resolve(symbol, territory)
        if code is not None:
            return code
    return None


_CACHED_CHARS = 120
_short_currency = lru_cache(maxsize=8192)(_currency)


def normalize_currency(value: object) -> str | None:
    """A currency field from structured data ("usd", "R$", "EUR") as an ISO code, else None."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if len(text) == 3 and text.isalpha():
        return text.upper()
    return detect_currency(text)
