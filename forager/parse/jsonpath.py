"""JSON paths: ``score.home``, ``items.0.price`` — dotted keys, numbers index lists.

One syntax for every reader of JSON responses: live monitors' ``json`` field maps
(``forager.parse.fieldmap``, checked by ``forager.monitors.extract``) and selector maps'
``{"json": "…"}`` rules (``forager.parse.selector_rules``).
"""

from __future__ import annotations

from typing import Any

# Dotted segments (at most 20); a segment of digits indexes a list.
JSON_PATH = r"^[A-Za-z0-9_\-]{1,100}(?:\.[A-Za-z0-9_\-]{1,100}){0,19}(?![\s\S])"


def value_at(doc: Any, path: str) -> Any:
    """The value at ``path`` in ``doc`` (None when any step finds nothing)."""
    for part in path.split("."):
        if isinstance(doc, dict):
            doc = doc.get(part)
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return None
        if doc is None:
            return None
    return doc
