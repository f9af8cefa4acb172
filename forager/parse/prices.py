"""Exact ``Decimal`` prices from shop text in any common locale, plus currency detection."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from urllib.parse import urlsplit

# A run of digits with the separators shops put inside numbers (incl. NBSP / narrow NBSP / ').
_NUMBER = re.compile(r"\d(?:[\d.,'’\u00a0\u202f\u2009 ]*\d)?")
_GROUPS = re.compile(r"\d+|[^\d]+")
_PLAIN = re.compile(r"-?\d+(?:\.\d+)?")
_THOUSANDS_ONLY = re.compile(r"\d{1,3}\.\d{3}")  # "1.299": a thousands mark, not a decimal
_SCIENTIFIC = re.compile(r"-?\d+(?:\.\d+)?[eE][+-]?\d{1,4}")
_SPACES = "\u00a0\u202f\u2009 "

# Locales (language or language-region) that write 1.299,90: the comma is the decimal mark.
_COMMA_DECIMAL_LANGS = frozenset(
    {"pt", "de", "fr", "it", "es", "nl", "ro", "pl", "cs", "sk", "da", "sv", "fi", "nb", "no"}
    | {"et", "lv", "lt", "hu", "hr", "sl", "bg", "ru", "uk", "tr", "el", "id", "vi"}
)

# Symbols and words, longest first so "R$" wins over "$" and "US$" over "$".
_SYMBOLS: tuple[tuple[str, str], ...] = (
    ("NT$", "TWD"),
    ("R$", "BRL"),
    ("US$", "USD"),
    ("U$", "USD"),
    ("CA$", "CAD"),
    ("C$", "CAD"),
    ("AU$", "AUD"),
    ("A$", "AUD"),
    ("NZ$", "NZD"),
    ("HK$", "HKD"),
    ("S$", "SGD"),
    ("MX$", "MXN"),
    ("£", "GBP"),
    ("€", "EUR"),
    ("¥", "JPY"),
    ("₹", "INR"),
    ("₩", "KRW"),
    ("₺", "TRY"),
    ("₽", "RUB"),
    ("₴", "UAH"),
)
# The symbols above that are not words, in the same order: the "$" ones (tried only when the text
# has a "$"), then single signs.
_DOLLAR_SYMBOLS = tuple((s, c) for s, c in _SYMBOLS if not s.isalpha() and "$" in s)
_SIGN_SYMBOLS = tuple((s, c) for s, c in _SYMBOLS if not s.isalpha() and "$" not in s)
assert _SYMBOLS[: len(_DOLLAR_SYMBOLS)] == _DOLLAR_SYMBOLS  # every "$" symbol comes first
_WORD_CODES = {
    "lei": "RON",
    "zł": "PLN",
    "kč": "CZK",
    "ft": "HUF",
    "kn": "HRK",
    "лв": "BGN",
    "грн": "UAH",
    "руб": "RUB",
    "б.р.": "BYN",
}
_ISO_CODES = frozenset(
    [
        "USD",
        "EUR",
        "GBP",
        "BRL",
        "CAD",
        "AUD",
        "NZD",
        "CHF",
        "JPY",
        "CNY",
        "INR",
        "MXN",
        "CLP",
        "ARS",
        "COP",
        "PEN",
        "UYU",
        "RON",
        "PLN",
        "CZK",
        "HUF",
        "SEK",
        "NOK",
        "DKK",
        "TRY",
        "RUB",
        "UAH",
        "ZAR",
        "SGD",
        "HKD",
        "KRW",
        "ILS",
        "AED",
        "SAR",
        "BYN",
        "HRK",
        "BGN",
        "TWD",
        "PKR",
        "LKR",
        "NPR",
        "MUR",
    ]
)
# ``\b[A-Z]{3}\b`` (an upper-case code), written to start with the letter class so that ``re``
# skips ahead to capitals instead of trying the word boundary at every character.
UPPER_CODE = re.compile(r"[A-Z](?<!\w[A-Z])[A-Z]{2}(?!\w)")
# Not inside a word: no letter (Latin or Cyrillic) on either side.
_WORD_SYMBOL = re.compile(r"(?i)(?<![^\W\d_])(lei|zł|kč|ft|kn|лв|грн|руб|б\.р\.)(?![^\W\d_])")
# The words' first letters, as case-blind: a text without one holds no currency word (a cheap
# test, where the lookbehind above is tried at every character).
_WORD_SYMBOL_START = re.compile(r"(?i)[lzkfлгрб]")

# "Rs 23,450" / "Rs. 999": rupees, whose country the TLD says (India when it does not).
_RUPEES = re.compile(r"(?<![^\W\d_])Rs\.?(?![^\W\d_])")
_RUPEES_BY_TLD = {"pk": "PKR", "lk": "LKR", "np": "NPR", "mu": "MUR", "in": "INR"}
# Where a bare "$" is not US dollars: country-code TLDs of peso/dollar countries.
_DOLLAR_BY_TLD = {
    "ca": "CAD",
    "au": "AUD",
    "nz": "NZD",
    "mx": "MXN",
    "cl": "CLP",
    "ar": "ARS",
    "co": "COP",
    "uy": "UYU",
    "sg": "SGD",
    "hk": "HKD",
    "br": "BRL",
    "tw": "TWD",
}
# The currency a country TLD implies when a page shows no symbol at all.
_CURRENCY_BY_TLD = {
    **_DOLLAR_BY_TLD,
    "uk": "GBP",
    "ie": "EUR",
    "de": "EUR",
    "fr": "EUR",
    "it": "EUR",
    "es": "EUR",
    "nl": "EUR",
    "be": "EUR",
    "at": "EUR",
    "pt": "EUR",
    "fi": "EUR",
    "ee": "EUR",
    "ro": "RON",
    "pl": "PLN",
    "se": "SEK",
    "jp": "JPY",
    "in": "INR",
    "tr": "TRY",
    "ch": "CHF",
    "com": "USD",
}


def _comma_is_decimal(locale_hint: str | None) -> bool | None:
    """True/False when the locale fixes the decimal mark, None when unknown."""
    if not locale_hint:
        return None
    lang = locale_hint.replace("_", "-").split("-")[0].lower()
    if lang in _COMMA_DECIMAL_LANGS:
        return True
    if lang in {"en", "ja", "zh", "ko", "he", "th"}:
        return False
    return None


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


def parse_price(text: str, locale_hint: str | None = None) -> Decimal | None:
    """The first price in ``text`` as an exact Decimal ("R$ 1.299,90" -> 1299.90), else None."""
    if not text:
        return None
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
    plain = _from_groups(groups, separators, _comma_is_decimal(locale_hint))
    try:
        return Decimal(plain)
    except InvalidOperation:
        return None


def to_decimal(value: object) -> Decimal | None:
    """A structured-data number (Decimal, int, "1299.9", "1.299,90") as Decimal; floats via repr.

    NaN and infinities (JSON-LD may hold them: Python's JSON decoder accepts them) are None.
    """
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


def _tld(url: str | None) -> str | None:
    if not url:
        return None
    host = (urlsplit(url).hostname or "").rstrip(".")
    if not host or host.replace(".", "").isdigit() or host == "localhost":
        return None
    return host.rsplit(".", 1)[-1]


def currency_for_url(url: str | None) -> str | None:
    """The currency a shop's country TLD implies (amazon.co.uk -> GBP), else None."""
    tld = _tld(url)
    return _CURRENCY_BY_TLD.get(tld) if tld else None


def detect_currency(text: str | None, url: str | None = None) -> str | None:
    """ISO 4217 code from a price text's code or symbol; "$" resolved by the URL's TLD."""
    if not text:
        return None
    for match in UPPER_CODE.finditer(text):
        if match.group(0) in _ISO_CODES:
            return match.group(0)
    if "$" in text:
        for symbol, code in _DOLLAR_SYMBOLS:
            if symbol in text:
                return code
    for symbol, code in _SIGN_SYMBOLS:
        if symbol in text:
            return code
    word = _WORD_SYMBOL.search(text) if _WORD_SYMBOL_START.search(text) else None
    if word:
        return _WORD_CODES[word.group(1).lower()]
    if "₨" in text or ("Rs" in text and _RUPEES.search(text)):
        tld = _tld(url)
        return _RUPEES_BY_TLD.get(tld or "", "INR")
    if "$" in text:
        tld = _tld(url)
        return _DOLLAR_BY_TLD.get(tld, "USD") if tld else "USD"
    return None


def normalize_currency(value: object) -> str | None:
    """A currency field from structured data ("usd", "R$", "EUR") as an ISO code, else None."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if len(text) == 3 and text.isalpha():
        return text.upper()
    return detect_currency(text)
