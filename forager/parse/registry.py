"""Parser registry: parsers by name, and the default parser for a host.

Filled once per process from ``forager.parse.plugins.discover`` (built-ins and plugins alike),
plus parsers that code registers on import (``register``; ``FORAGER_PARSER_MODULES``).
"""

from __future__ import annotations

from functools import cache

from forager.errors import ForagerError
from forager.parse.base import Parser
from forager.parse.plugins import ParserEntry, check, discover

FALLBACK = "generic"
# Parsers registered by code; kept apart from discovery, which may be redone.
_REGISTERED: dict[str, ParserEntry] = {}


class UnknownParser(ForagerError):
    """A parser name that is not registered."""


@cache
def _registry() -> tuple[dict[str, ParserEntry], list[ParserEntry]]:
    """The parser of each name, and the entries that lost their name to another (reported)."""
    by_name: dict[str, ParserEntry] = {}
    shadowed: list[ParserEntry] = []
    for entry in discover():
        current = by_name.get(entry.name)
        if current is None or (current.parser is None and entry.parser is not None):
            by_name[entry.name] = entry
            if current is not None:
                shadowed.append(current)
        else:
            shadowed.append(entry)
    return by_name, shadowed


def _entries() -> dict[str, ParserEntry]:
    return {**_registry()[0], **_REGISTERED} if _REGISTERED else _registry()[0]


def entries() -> list[ParserEntry]:
    """Every parser found, usable or broken (with its error), by name."""
    shadowed = _registry()[1]
    return sorted([*_entries().values(), *shadowed], key=lambda e: (e.name, e.parser is None))


def _parsers() -> dict[str, Parser]:
    return {name: e.parser for name, e in _entries().items() if e.parser is not None}


def register(parser: Parser) -> None:
    """Add a parser from code (a module in ``FORAGER_PARSER_MODULES`` calls this on import)."""
    check(parser)
    reference = f"{type(parser).__module__}:{type(parser).__qualname__}"
    _REGISTERED[parser.name] = ParserEntry(parser.name, "module", reference, parser=parser)


def parser_names() -> list[str]:
    """Names of every usable parser, sorted."""
    return sorted(_parsers())


def get_parser(name: str) -> Parser:
    """The parser registered under ``name``."""
    entry = _REGISTERED.get(name) or _registry()[0].get(name)
    if entry is not None and entry.parser is not None:
        return entry.parser
    if entry is not None:
        raise UnknownParser(f"parser {name!r} is broken: {entry.error}")
    known = ", ".join(parser_names())
    raise UnknownParser(f"unknown parser {name!r} (known: {known})")


def _matches(pattern: str, host: str) -> bool:
    """Whether ``host`` is the pattern's host or a subdomain of it (``*``: one label)."""
    want, labels = pattern.split("."), host.split(".")
    if len(labels) < len(want):
        return False
    tail = labels[len(labels) - len(want) :]
    return all(w in ("*", got) for w, got in zip(want, tail, strict=True))


def _specificity(pattern: str) -> tuple[int, int]:
    labels = pattern.split(".")
    return (sum(label != "*" for label in labels), len(labels))


def parser_name_for_host(host: str) -> str:
    """The parser a new domain gets by default: the one whose host pattern fits ``host`` most
    specifically (a plugin before a built-in on a tie), else ``generic``."""
    host = host.strip().rstrip(".").lower()
    best: tuple[tuple[int, int], int, str] | None = None
    for entry in _entries().values():
        for pattern in entry.hosts:
            if _matches(pattern, host):
                rank = (_specificity(pattern), int(entry.origin != "builtin"), entry.name)
                if best is None or rank[:2] > best[:2]:
                    best = rank
    return best[2] if best is not None else FALLBACK
