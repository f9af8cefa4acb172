"""A job's ordered rules: the first whose pattern matches a link (taken from its region, when
it names one) says what the link's page is for — ``follow`` (a listing: its links are taken),
``parse`` (a product page: parsed as any task) or ``ignore``. A link no rule matches is ignored.

Patterns are RE2 regular expressions (linear time: no pattern a job's author writes can hang a
parse process), searched anywhere in the normalized URL, or globs matched against the whole URL
(``*`` stays within a path segment, ``**`` crosses them, ``?`` is one character).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import re2

from forager.errors import InvalidRequest

ACTIONS = ("follow", "parse", "ignore")
MIN_RECRAWL, MAX_RECRAWL = 60, 366 * 86_400
SYNTAXES = ("regex", "glob")


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: str
    action: str
    syntax: str = "regex"
    region: str | None = None  # a CSS selector: links are taken from inside it only
    recrawl_seconds: int | None = None  # a parse rule's pages crawled again this often

    def as_json(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "action": self.action,
            "syntax": self.syntax,
            "region": self.region,
            "recrawl_seconds": self.recrawl_seconds,
        }


@dataclass(frozen=True, slots=True)
class LinkPolicy:
    """What a parse process needs to take a job's links from a page (pickled to it)."""

    job_id: int
    scope: str
    hosts: tuple[str, ...]
    rules: tuple[Rule, ...]
    follow_nofollow: bool
    max_query_params: int
    max_url_length: int
    robots_sitemaps: bool = False


def glob_to_regex(glob: str) -> str:
    """A glob as an anchored regular expression (RE2 syntax)."""
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        ch = glob[i]
        out.append("[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch))
        i += 1
    return "^" + "".join(out) + "$"


@lru_cache(maxsize=256)
def compiled(rule: Rule) -> Any:
    """The rule's pattern, compiled once per process."""
    pattern = glob_to_regex(rule.pattern) if rule.syntax == "glob" else rule.pattern
    return re2.compile(pattern)


def matches(rule: Rule, url: str) -> bool:
    return compiled(rule).search(url) is not None


def check_rule(raw: dict[str, Any], index: int) -> Rule:
    """A rule from a job's request, or ``InvalidRequest`` naming the field at fault."""
    where = f"rules[{index}]"
    action = raw.get("action")
    if action not in ACTIONS:
        raise InvalidRequest(f"{where}.action must be one of {', '.join(ACTIONS)}", field=where)
    syntax = raw.get("syntax") or "regex"
    if syntax not in SYNTAXES:
        raise InvalidRequest(f"{where}.syntax must be regex or glob", field=where)
    pattern = raw.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise InvalidRequest(f"{where}.pattern must be a non-empty string", field=where)
    recrawl = raw.get("recrawl_seconds")
    if recrawl is not None and (
        action != "parse"
        or not isinstance(recrawl, int)
        or not MIN_RECRAWL <= recrawl <= MAX_RECRAWL
    ):
        raise InvalidRequest(
            f"{where}.recrawl_seconds: a parse rule's recrawl schedule, {MIN_RECRAWL} to "
            f"{MAX_RECRAWL} seconds",
            field=where,
        )
    rule = Rule(pattern, action, syntax, raw.get("region") or None, recrawl)
    try:
        compiled(rule)
    except re2.error as exc:
        message = f"{where}.pattern is not a valid RE2 pattern: {exc}"
        raise InvalidRequest(message, field=where) from exc
    if rule.region is not None:
        from selectolax.lexbor import LexborHTMLParser, SelectolaxError

        try:
            LexborHTMLParser("<p></p>").css(rule.region)
        except SelectolaxError as exc:
            raise InvalidRequest(
                f"{where}.region is not a valid CSS selector: {exc}", field=where
            ) from exc
    return rule
