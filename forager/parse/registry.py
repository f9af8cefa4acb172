"""Parser registry: parsers by name, and the default parser for a host."""

from __future__ import annotations

import re
from functools import cache

from forager.errors import ForagerError
from forager.parse.base import Parser

# amazon.com, amazon.com.br, amazon.co.uk, smile.amazon.de … (any Amazon country site)
_AMAZON_HOST = re.compile(r"(^|\.)amazon\.[a-z]{2,3}(\.[a-z]{2})?$")


class UnknownParser(ForagerError):
    """A parser name that is not registered."""


@cache
def _parsers() -> dict[str, Parser]:
    from forager.parse.amazon import AmazonParser
    from forager.parse.generic import GenericParser

    found: list[Parser] = [AmazonParser(), GenericParser()]
    return {parser.name: parser for parser in found}


def parser_names() -> list[str]:
    """Names of every registered parser, sorted."""
    return sorted(_parsers())


def get_parser(name: str) -> Parser:
    """The parser registered under ``name``."""
    try:
        return _parsers()[name]
    except KeyError:
        known = ", ".join(parser_names())
        raise UnknownParser(f"unknown parser {name!r} (known: {known})") from None


def parser_name_for_host(host: str) -> str:
    """The parser a new domain gets by default: ``amazon`` for Amazon sites, else ``generic``."""
    return "amazon" if _AMAZON_HOST.search(host.lower()) else "generic"
