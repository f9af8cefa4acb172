"""What a monitor may read from a page: a registered parser, or a selector map, checked.

A selector map names fields: ``{"score": "#score", "link": "a.more@href"}`` with CSS
(the text of the first match, or ``@attr`` for an attribute; the subset in ``CSS_SELECTOR``),
or ``{"home": "score.home", "first": "items.0.price"}`` with ``json`` (a dotted path;
numbers index lists). The reading itself runs in the parse processes, under their time budget
(``forager.parse.fieldmap``); the content hash of what was read is here.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from forager.parse.jsonpath import JSON_PATH
from forager.parse.registry import parser_names

SELECTOR_TYPES = ("css", "json")
MAX_FIELDS = 50
# A field name; a JSON path (dotted segments; numbers index lists); a CSS selector of the
# subset every engine parses: compounds of tag / * / #id / .class / [attr] / [attr="v"] /
# :first-child / :last-child / :nth-child(n) / :nth-of-type(n), joined by " " or " > ",
# then optionally "@attr" to read an attribute instead of the text.
FIELD_NAME = r"^[A-Za-z][A-Za-z0-9_]{0,63}(?![\s\S])"
_IDENT = r"[A-Za-z_][A-Za-z0-9_-]{0,62}"
_SUFFIX = (
    rf"(?:#{_IDENT}|\.{_IDENT}|\[{_IDENT}(?:=\"[^\"\\@\x00-\x1f\x7f]{{0,100}}\")?\]"
    r"|:(?:first-child|last-child|nth-child\([1-9][0-9]{0,3}\)|nth-of-type\([1-9][0-9]{0,3}\)))"
)
_COMPOUND = rf"(?:(?:{_IDENT}|\*){_SUFFIX}{{0,8}}|{_SUFFIX}{{1,8}})"
CSS_SELECTOR = rf"^{_COMPOUND}(?:(?: | > ){_COMPOUND}){{0,7}}(?:@{_IDENT})?(?![\s\S])"
_FIELD_RE = re.compile(FIELD_NAME)
_PATTERNS = {"css": re.compile(CSS_SELECTOR), "json": re.compile(JSON_PATH)}


def check_spec(parser_name: str | None, selector_type: str | None, selectors: Any) -> str | None:
    """Why a parser / selector-map choice is unusable, as ``field: reason``, or None."""
    if (parser_name is None) == (selectors is None):
        return "parser_name: give exactly one of parser_name, css and json_paths"
    if parser_name is not None:
        if parser_name not in parser_names():
            known = ", ".join(parser_names())
            return f"parser_name: unknown parser {parser_name!r} (known: {known})"
        return None
    field = "css" if selector_type == "css" else "json_paths"
    pattern = _PATTERNS.get(selector_type or "")
    if pattern is None:
        return f"selector_type: must be one of {', '.join(SELECTOR_TYPES)}"
    if not isinstance(selectors, dict) or not 1 <= len(selectors) <= MAX_FIELDS:
        return f"{field}: must map 1 to {MAX_FIELDS} field names to selectors"
    for name, selector in selectors.items():
        if not isinstance(name, str) or not _FIELD_RE.match(name):
            return f"{field}: field name {name!r} must match {FIELD_NAME}"
        if not isinstance(selector, str) or len(selector) > 500 or not pattern.match(selector):
            return f"{field}.{name}: {selector!r} is not a supported {selector_type} selector"
    return None


def content_hash(data: dict[str, Any]) -> str:
    """SHA-256 of the data's canonical JSON: equal data, equal hash, whatever the key order."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
