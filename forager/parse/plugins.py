"""Finding parsers: the built-ins and every entry point of the group ``forager.parsers``.

Built-ins are declared exactly as plugins are (``name = "module:attribute"``) and go through
the same loader and checks (docs/PARSERS.md). A plugin that cannot be imported, is not a
parser, or raises while it is made is recorded as *broken* with its name and the error — it
is logged and listed (``forager parsers list``, ``GET /api/parsers``), never fatal.
"""

from __future__ import annotations

import importlib
import logging
import re
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Literal

from forager.errors import ForagerError
from forager.parse.base import Parser

log = logging.getLogger(__name__)

GROUP = "forager.parsers"
# The built-in parsers, as a plugin's pyproject declares its entry point.
BUILTINS = {
    "amazon": "forager.parse.amazon:AmazonParser",
    "generic": "forager.parse.generic:GenericParser",
    "selector": "forager.parse.selectors:SelectorParser",  # a domain's own selector map
}
NAME = r"^[a-z][a-z0-9_-]{0,62}[a-z0-9]$"
_NAME = re.compile(NAME)
# A host pattern: dot-separated labels, each a DNS label or "*" (exactly one label).
_LABEL = r"(?:\*|[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)"
_HOST_PATTERN = re.compile(rf"^{_LABEL}(?:\.{_LABEL}){{0,9}}$")
MAX_VERSION = 50  # products.parser_version is VARCHAR(50)

Origin = Literal["builtin", "plugin", "module"]


class PluginProblem(ForagerError):
    """Why an entry point does not give a usable parser (the message says what to fix)."""


@dataclass(frozen=True, slots=True)
class ParserEntry:
    """One parser as found: where it came from, and the parser or the error that stopped it."""

    name: str
    origin: Origin
    reference: str  # "module:attribute"
    dist: str | None = None  # the distribution (package) that declared the entry point
    dist_version: str | None = None
    parser: Parser | None = None
    error: str | None = None

    @property
    def version(self) -> str | None:
        return self.parser.version if self.parser is not None else None

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(getattr(self.parser, "hosts", ())) if self.parser is not None else ()


def check(parser: Any, name: str | None = None) -> Parser:
    """``parser`` if it keeps the contract (name, version, hosts, parse), else PluginProblem."""
    if not hasattr(parser, "parse") and not hasattr(parser, "name"):
        kind = type(parser).__name__
        raise PluginProblem(
            f"it gives an object of type {kind}, not a parser (name, version, parse(html, url))"
        )
    got = getattr(parser, "name", None)
    if not isinstance(got, str) or not _NAME.match(got):
        raise PluginProblem(f"its name {got!r} must be a string matching {NAME}")
    if name is not None and got != name:
        raise PluginProblem(f"the entry point is named {name!r} but the parser {got!r}")
    version = getattr(parser, "version", None)
    if not isinstance(version, str) or not 1 <= len(version) <= MAX_VERSION:
        raise PluginProblem(f"its version {version!r} must be a string of 1 to {MAX_VERSION}")
    if not callable(getattr(parser, "parse", None)):
        raise PluginProblem("it has no parse(html, url) method")
    hosts = getattr(parser, "hosts", ())
    if isinstance(hosts, str) or not isinstance(hosts, tuple | list):
        raise PluginProblem(f"its hosts {hosts!r} must be a tuple of host patterns")
    for pattern in hosts:
        if not isinstance(pattern, str) or not _HOST_PATTERN.match(pattern):
            raise PluginProblem(
                f"host pattern {pattern!r} is not lower-case labels or '*' joined by dots"
            )
    checked: Parser = parser
    return checked


def instantiate(target: Any, name: str) -> Parser:
    """The parser an entry point names: a class (made with no arguments), a factory function,
    or a ready instance."""
    if isinstance(target, type) or (callable(target) and not hasattr(target, "parse")):
        return check(target(), name)
    return check(target, name)


def _load(name: str, reference: str, origin: Origin, **where: Any) -> ParserEntry:
    try:
        module, _, attribute = reference.partition(":")
        target: Any = importlib.import_module(module)
        for part in attribute.split(".") if attribute else ():
            target = getattr(target, part)
        parser = instantiate(target, name)
    except PluginProblem as exc:
        return _broken(name, reference, origin, f"not a parser: {exc}", where)
    except Exception as exc:  # a plugin's bug must not stop Forager
        return _broken(name, reference, origin, f"{type(exc).__name__}: {exc}", where)
    return ParserEntry(name, origin, reference, parser=parser, **where)


def _broken(
    name: str, reference: str, origin: Origin, error: str, where: dict[str, Any]
) -> ParserEntry:
    dist = f" (from {where.get('dist')} {where.get('dist_version')})" if where.get("dist") else ""
    log.warning("parser %s%s is broken and not used: %s", name, dist, error)
    return ParserEntry(name, origin, reference, error=error, **where)


def _plugin(point: EntryPoint) -> ParserEntry:
    dist = point.dist
    where = {"dist": dist.name, "dist_version": dist.version} if dist is not None else {}
    return _load(point.name, point.value, "plugin", **where)


def discover() -> list[ParserEntry]:
    """Every parser: the built-ins, then each ``forager.parsers`` entry point (by name).

    A plugin whose name is already taken (by a built-in or another plugin) is reported broken.
    """
    found = [_load(name, ref, "builtin") for name, ref in BUILTINS.items()]
    try:
        points = sorted(entry_points(group=GROUP), key=lambda p: (p.name, p.value))
    except Exception as exc:  # a broken distribution's metadata
        log.warning("could not read the %s entry points: %s", GROUP, exc)
        points = []
    taken = set(BUILTINS)
    for point in points:
        if point.name in taken:
            found.append(_broken_duplicate(point))
            continue
        entry = _plugin(point)
        found.append(entry)
        if entry.parser is not None:
            taken.add(point.name)
    return found


def _broken_duplicate(point: EntryPoint) -> ParserEntry:
    dist = point.dist
    where = {"dist": dist.name, "dist_version": dist.version} if dist is not None else {}
    error = f"the name {point.name!r} is already taken by another parser"
    return _broken(point.name, point.value, "plugin", error, where)
