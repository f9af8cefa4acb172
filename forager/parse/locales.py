"""Currency symbols, countries' currencies and number separators from CLDR (through Babel).

Shops write prices the way their locale does: "₩12,900", "1 290 ₽", "￥1,280", "1.234,56 €",
"٣٬٤٩٩٫٠٠ ر.س.". The symbols and separators come from the Unicode CLDR data Babel ships, read
once per process (``functools.cache``), so a new symbol reaches the parser with a Babel update
instead of a list typed here. ``CURRENCY_WORDS`` holds only what CLDR does not list as a symbol
but shops print after an amount ("12,900원", "100 руб.").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import babel
from babel import Locale, UnknownLocaleError
from babel.numbers import (
    get_currency_precision,
    get_currency_symbol,
    get_decimal_symbol,
    get_territory_currencies,
)

from forager.db import template
from forager.parse.signals import literal_trie

# The languages whose CLDR currency symbols are read: the shop languages of the Latin, Cyrillic,
# Greek, Arabic, Hebrew, Thai, Indic and CJK scripts. (Every CLDR locale would add 0.3 s to the
# first parse of each process for symbols no shop in these languages' countries writes.)
LANGUAGES = (
    *("en", "de", "fr", "it", "es", "pt", "nl", "pl", "cs", "sk", "sl", "hr", "sr", "bs", "hu"),
    *("ro", "bg", "ru", "uk", "kk", "be", "el", "tr", "ar", "he", "fa", "ur", "hi", "bn", "th"),
    *("vi", "id", "ms", "zh", "zh_Hant", "ja", "ko", "sv", "da", "nb", "fi", "et", "lv", "lt"),
    *("is", "ka", "hy", "az", "uz", "mk", "sq", "mn", "km", "lo", "ta", "si"),
)
# Amounts' unit words that CLDR gives as display names, not symbols (lower-case) -> currency.
CURRENCY_WORDS = {
    "원": "KRW",
    "円": "JPY",
    "圓": "TWD",
    "руб": "RUB",
    "руб.": "RUB",
    "грн": "UAH",
    "грн.": "UAH",
    "тг": "KZT",
    "б.р.": "BYN",
    "лв": "BGN",
    "lei": "RON",
    "kn": "HRK",
    "ש״ח": "ILS",
    'ש"ח': "ILS",
    "บาท": "THB",
    "ريال": "SAR",
    "ر.س": "SAR",
    "درهم": "AED",
    "د.إ": "AED",
    "ج.م": "EGP",
}
# Three capitals that are both a currency code and a word shop texts use in capitals ("ALL
# SIZES", "AMD Ryzen 5", "TOP 10", "GEL 50 ml"): not read as a currency code.
_CODE_WORDS = frozenset({"ALL", "AMD", "BOB", "CUP", "GEL", "MOP", "SOS", "TOP"})
# Bidirectional marks that CLDR's Arabic symbols carry and shops may leave out.
_MARKS = str.maketrans("", "", "\u200e\u200f\u061c")
_TLD_TERRITORY = {"uk": "GB"}


def _strip(symbol: str) -> str:
    return symbol.translate(_MARKS).strip()


Tables = tuple[dict[str, frozenset[str]], frozenset[str]]


@cache
def _tables() -> Tables:
    """(symbol -> the currencies it may stand for, the currency codes in use today), read from
    the user's cache when this code and this Babel built them before (``_cache_file``), else
    built and kept there.

    Building them loads the CLDR data of every locale of ``LANGUAGES``: ~60 MB that Babel then
    keeps for the life of the process (the parse processes' fork server held it, shared with
    every parse process), and 0.3 s of CPU. Nothing here is required: when the cache cannot be
    read or written, they are built."""
    path = _cache_file()
    if path is not None:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
            return _from_json(json.loads(path.read_text(encoding="utf-8")))
    tables = _build_tables()
    if path is not None:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            partial.write_text(json.dumps(_to_json(tables), ensure_ascii=False), encoding="utf-8")
            os.replace(partial, path)  # whole or not at all, whoever else writes it meanwhile
    return tables


def _cache_file() -> Path | None:
    """``currency-tables-<key>.json`` in the cache directory ``forager crawl`` keeps its schema
    template in, its key made of this module's source and Babel's version; None when there is
    no home to cache in."""
    try:
        folder = template.cache_dir()
        source = Path(__file__).read_bytes()
    except (OSError, RuntimeError):
        return None
    key = hashlib.sha256(source + babel.__version__.encode()).hexdigest()[:16]
    return folder / f"currency-tables-{key}.json"


def _to_json(tables: Tables) -> dict[str, Any]:
    found, current = tables
    return {"symbols": {s: sorted(c) for s, c in found.items()}, "current": sorted(current)}


def _from_json(data: dict[str, Any]) -> Tables:
    """The tables ``_to_json`` wrote (ValueError, TypeError, KeyError: not those)."""
    found, current = data["symbols"], data["current"]
    if not isinstance(found, dict) or not found or not isinstance(current, list) or not current:
        raise ValueError("not the currency tables")
    tables = (
        {str(s): frozenset(map(str, c)) for s, c in found.items() if isinstance(c, list)},
        frozenset(map(str, current)),
    )
    if len(tables[0]) != len(found):
        raise ValueError("not the currency tables")
    return tables


def _build_tables() -> Tables:
    current: set[str] = set(CURRENCY_WORDS.values())
    for territory in map(str, Locale("en").territories):
        if len(territory) == 2 and territory.isalpha():
            current.update(get_territory_currencies(territory))
    found: dict[str, set[str]] = {}
    for name in LANGUAGES:
        for code, symbol in Locale.parse(name).currency_symbols.items():
            symbol = _strip(symbol)
            # A code is read as a code; one or two capitals ("R", "KM") mean other things in text.
            if code not in current or (symbol.isalpha() and symbol.isupper()):
                continue
            found.setdefault(symbol, set()).add(code)
            if symbol.endswith("."):
                found.setdefault(symbol[:-1], set()).add(code)  # "лв." is also written "лв"
    for word, code in CURRENCY_WORDS.items():
        for spelling in (word, word.capitalize(), word.upper()):
            found.setdefault(spelling, set()).add(code)
    return {s: frozenset(c) for s, c in found.items()}, frozenset(current - _CODE_WORDS)


def symbols() -> dict[str, frozenset[str]]:
    """Every currency symbol or unit word -> the currencies it may stand for."""
    return _tables()[0]


def is_currency_code(code: str) -> bool:
    """Whether ``code`` is the ISO 4217 code of a currency in use (or one in ``CURRENCY_WORDS``)."""
    return code in _tables()[1]


@cache
def symbol_pattern() -> re.Pattern[str]:
    """One pattern finding any symbol of ``symbols()`` (leftmost, longest match), as written."""
    return re.compile(literal_trie(symbols()))


def cased(symbol: str) -> bool:
    """Whether ``symbol`` is written in a script with capitals (Latin, Cyrillic, Greek), whose
    words are set apart by spaces: such a symbol counts only outside a word ("Rs" in "Mrs")."""
    return any(char.lower() != char.upper() for char in symbol)


@cache
def territory_of_tld(tld: str | None) -> str | None:
    """The CLDR territory of a country-code TLD ("uk" -> "GB"), else None."""
    if not tld or len(tld) != 2 or not tld.isalpha():
        return None
    return _TLD_TERRITORY.get(tld, tld.upper())


@cache
def territory_currency(territory: str) -> str | None:
    """The currency a territory uses today (CLDR), else None."""
    currencies = get_territory_currencies(territory)
    return currencies[0] if currencies else None


@cache
def local_symbol(territory: str) -> str | None:
    """How the territory's own locale writes its currency ("CL" -> "$", "CN" -> "¥")."""
    code = territory_currency(territory)
    if code is None:
        return None
    try:
        return _strip(get_currency_symbol(code, Locale.parse(f"und_{territory}")))
    except (UnknownLocaleError, ValueError):
        return None


@lru_cache(maxsize=1024)
def resolve(symbol: str, territory: str | None) -> str | None:
    """The currency ``symbol`` stands for on a shop of ``territory``: the territory's own when
    the symbol may be it ("$" on a .cl shop is CLP), else the only one, else the one English
    writes so ("$" USD, "¥" JPY, "£" GBP), else None."""
    found = symbols().get(symbol)
    if not found:
        return None
    if territory is not None and _local_for(symbol, territory, found):
        return territory_currency(territory)
    if len(found) == 1:
        return next(iter(found))
    english = [code for code in sorted(found) if _english_symbol(code) == symbol]
    return english[0] if len(english) == 1 else None


def _local_for(symbol: str, territory: str, found: frozenset[str]) -> bool:
    local = territory_currency(territory)
    written = (local_symbol(territory) or "").rstrip(".")
    return local is not None and (local in found or written == symbol.rstrip("."))


@cache
def _english_symbol(code: str) -> str:
    return get_currency_symbol(code, "en")


@cache
def comma_is_decimal(language: str) -> bool | None:
    """Whether the language writes "1.299,90" (CLDR's decimal symbol), None when unknown."""
    try:
        return get_decimal_symbol(Locale.parse(language.replace("-", "_"))) == ","
    except (UnknownLocaleError, ValueError):
        return None


@cache
def minor_digits(code: str) -> int:
    """How many decimals the currency has (CLDR: CLP, KRW, JPY 0; EUR 2; KWD 3)."""
    return int(get_currency_precision(code))
