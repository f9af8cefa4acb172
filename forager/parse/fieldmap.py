"""A monitor's data read from one page: a registered parser's record, or a field map.

A field map names fields: ``{"score": "#score", "link": "a.more@href"}`` with CSS (the text of
the first match, or ``@attr`` for an attribute), or ``{"home": "score.home"}`` with ``json``
(a dotted path; numbers index lists). A field that matches nothing is ``None``. Which maps
are accepted is the monitors' business (``forager.monitors.extract.check_spec``); this runs
in a parse process, under its time budget (``forager.worker.parsing``).
"""

from __future__ import annotations

import json
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from forager.errors import ParseError
from forager.parse.items import result_json
from forager.parse.jsonpath import value_at
from forager.parse.registry import get_parser


def read(
    body: str, url: str, parser_name: str | None, selector_type: str | None, selectors: Any
) -> dict[str, Any]:
    """The monitor's data from one page; ``ParseError`` when the page cannot be read."""
    if parser_name is not None:
        return result_json(get_parser(parser_name).parse(body, url))
    fields: dict[str, str] = selectors or {}
    if selector_type == "json":
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise ParseError(f"the page is not JSON: {exc}") from None
        return {name: value_at(doc, path) for name, path in fields.items()}
    tree = LexborHTMLParser(body)
    data: dict[str, Any] = {}
    for name, selector in fields.items():
        css, _, attr = selector.partition("@")
        node = tree.css_first(css.strip())
        if node is None:
            data[name] = None
        elif attr:
            data[name] = node.attributes.get(attr.strip())
        else:
            data[name] = node.text(strip=True)
    return data
