"""The rules of selector maps: one field's rule compiled (CSS, XPath, JSON-LD path, JSON path,
steps) and read from a page or from inside one block of it (docs/PARSERS.md);
``forager.parse.selectors`` builds maps of them. A ``json`` rule reads a JSON response (an API's
answer, e.g. to a POST task) with the monitors' paths (``forager.parse.jsonpath``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import re2
from lxml import etree
from lxml import html as lxml_html
from selectolax.lexbor import LexborHTMLParser

from forager.errors import InvalidRequest
from forager.parse.base import EXTRACTED_FIELDS
from forager.parse.identifiers import gtin
from forager.parse.jsonpath import JSON_PATH, value_at
from forager.parse.prices import detect_currency, parse_price
from forager.parse.structured import (
    absolute_url,
    clean,
    has_type,
    json_ld_blocks,
    local_name,
    walk_json,
)

LINKS = "links"  # a selector map's key: the links a crawl job takes from the page (issue 32)
MAX_STEPS = 8
MAX_EXPR = 500
STEPS = ("strip", "lower", "price", "number", "present", "join", "regex")
_KINDS = ("css", "xpath", "jsonld", "json")
_JSON_PATH = re.compile(JSON_PATH)
_NOT_JSON = object()  # a page whose body does not parse as JSON: every json rule finds nothing
_JSON_VALUES = (dict, list, str, int, float, bool)  # a block of a JSON list
_DECIMALS = frozenset({"price", "original_price", "rating"})
_JSONLD = re.compile(
    r"^(?:([A-Za-z]{1,50}):)?([A-Za-z0-9@_\-]{1,100}(?:\.[A-Za-z0-9@_\-]{1,100}){0,19})$"
)
_ATTR = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:.\-]{0,99}$")
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)?")
# A schema.org availability as JSON-LD writes it: "https://schema.org/InStock", "schema:InStock".
_SCHEMA_ORG = re.compile(r"(?i)(?:https?://(?:www\.)?schema\.org/|schema:)[A-Za-z]+$")
SELF = "self"  # an item field's rule with neither css nor xpath: the block itself
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False

Value = str | list[str] | Decimal | int | bool | None


@dataclass(frozen=True, slots=True)
class Rule:
    """One field's compiled rule."""

    field: str
    kind: str
    expr: str
    attr: str | None
    all: bool
    steps: tuple[Callable[[Value], Value], ...]
    target: Any  # a CSS string, a compiled XPath, (type, path parts) or a JSON path


class Page:
    """The page's trees, each built on first use."""

    def __init__(self, html: str) -> None:
        self.html = html
        self._lexbor: LexborHTMLParser | None = None
        self._lxml: Any = None
        self._jsonld: list[Any] | None = None
        self._json: Any = None
        self._json_read = False

    @property
    def lexbor(self) -> LexborHTMLParser:
        if self._lexbor is None:
            self._lexbor = LexborHTMLParser(self.html)
        return self._lexbor

    @property
    def json(self) -> Any:
        """The body as JSON (``_NOT_JSON`` when it is not), parsed once."""
        if not self._json_read:
            self._json_read = True
            try:
                self._json = json.loads(self.html)
            except ValueError:
                self._json = _NOT_JSON
        return self._json

    def find(self, rule: Rule) -> Value:
        if rule.kind == "json":
            got: list[str | None] = list(_json_scalars(self.json, rule.target))
        elif rule.kind == "css":
            nodes = (
                self.lexbor.css(rule.target) if rule.all else [self.lexbor.css_first(rule.target)]
            )
            got = [_node_value(n, rule.attr) for n in nodes if n is not None]
        elif rule.kind == "xpath":
            got = [_xpath_value(v) for v in _as_list(rule.target(self.lxml))]
        else:
            if self._jsonld is None:
                self._jsonld = [doc for _, doc in json_ld_blocks(self.lexbor)]
            got = list(_jsonld_values(self._jsonld, *rule.target))
        return _picked(got, rule.all)

    @property
    def lxml(self) -> Any:
        if self._lxml is None:
            self._lxml = lxml_html.document_fromstring(self.html or "<html></html>")
        return self._lxml

    def blocks(self, rule: Rule) -> list[Any]:
        """The nodes an item extractor's ``each`` matches (lexbor nodes, lxml elements, or the
        JSON values of the list at a ``json`` path)."""
        if rule.kind == "json":
            found = _json_at(self.json, rule.target)
            return found if isinstance(found, list) else [] if found is None else [found]
        if rule.kind == "css":
            return list(self.lexbor.css(rule.target))
        return [e for e in _as_list(rule.target(self.lxml)) if isinstance(e, etree._Element)]

    def find_in(self, block: Any, rule: Rule) -> Value:
        """A rule's value read inside ``block`` (or from the block itself)."""
        got: list[str | None]
        if rule.kind == "json" or (rule.kind == SELF and isinstance(block, _JSON_VALUES)):
            inside = block if rule.kind == SELF else _json_at(block, rule.target)
            got = list(_json_scalars(inside, None))
        elif isinstance(block, etree._Element):
            nodes = [block] if rule.kind == SELF else _as_list(rule.target(block))
            got = [_xpath_value(v) for v in nodes]
        else:
            if rule.kind == SELF:
                nodes = [block]
            elif rule.all:
                nodes = block.css(rule.target)
            else:
                nodes = [block.css_first(rule.target)]
            got = [_node_value(n, rule.attr) for n in nodes if n is not None]
        return _picked(got, rule.all)


def _picked(got: list[str | None], every: bool) -> Value:
    found = [g for g in got if g is not None]
    if every:
        return found
    return found[0] if found else None


def _node_value(node: Any, attr: str | None) -> str | None:
    if attr:
        value = node.attributes.get(attr)
        return value.strip() if isinstance(value, str) else None
    return clean(node.text(deep=True, separator=" "))


def _as_list(result: Any) -> list[Any]:
    return result if isinstance(result, list) else [result]


def _xpath_value(value: Any) -> str | None:
    if isinstance(value, lxml_html.HtmlElement):
        return clean(value.text_content())
    if isinstance(value, etree._Element):
        return clean("".join(str(t) for t in value.itertext()))
    if isinstance(value, bool):
        return "true" if value else None
    if isinstance(value, float):
        return None if value != value else format(Decimal(str(value)).normalize(), "f")
    return clean(str(value))


def _json_at(doc: Any, path: str) -> Any:
    return None if doc is _NOT_JSON else value_at(doc, path)


def _json_scalars(doc: Any, path: str | None) -> list[str]:
    """The text of the value at ``path`` (a list of scalars: each of them; numbers as JSON
    writes them, so ``19.9`` stays exact)."""
    value = doc if path is None else _json_at(doc, path)
    if value is _NOT_JSON:
        return []
    items = value if isinstance(value, list) else [value]
    return [
        ("true" if v else "") if isinstance(v, bool) else v if isinstance(v, str) else json.dumps(v)
        for v in items
        if v is not None and not isinstance(v, dict | list)
    ]


def _jsonld_values(docs: list[Any], wanted: str | None, parts: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for doc in docs:
        for obj, _ in walk_json(doc):
            if wanted is not None and not has_type(obj, wanted):
                continue
            value = _follow(obj, parts)
            if value is not None:
                found.extend(_scalars(value))
        if found:
            break
    return found


def _follow(value: Any, parts: tuple[str, ...]) -> Any:
    for part in parts:
        if isinstance(value, list):
            if part.isdigit():
                value = value[int(part)] if int(part) < len(value) else None
                continue
            value = value[0] if value else None  # offers: [{…}] reads the first
        value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return None
    return value


def _scalars(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [
        str(v) if not isinstance(v, bool) else ("true" if v else "")
        for v in items
        if v is not None and not isinstance(v, dict | list)
    ]


def product_value(name: str, value: Value, url: str) -> Value:
    """A field's value in the record's type (a list only for image_urls)."""
    if name == "image_urls":
        items = value if isinstance(value, list) else [] if value is None else [value]
        return [absolute_url(str(v), url) for v in items if str(v)]
    if isinstance(value, list):
        if not value:
            return None
        raise ValueError(f'gives {len(value)} values: add a join step or drop "all"')
    if value is None or value == "":
        return None
    if name in _DECIMALS:
        amount = value if isinstance(value, Decimal) else parse_price(str(value))
        if amount is None:
            raise ValueError(f"{value!r} is not a number")
        return amount
    if name == "review_count":
        number = value if isinstance(value, Decimal) else _number(str(value))
        if number is None:
            raise ValueError(f"{value!r} is not a number")
        return int(number)
    if name == "is_available":
        return bool(value)
    if name == "availability" and _SCHEMA_ORG.match(str(value)):
        return local_name(str(value))  # as the generic parser keeps it
    if name == "currency":
        code = detect_currency(str(value), url) or str(value).strip().upper()
        if not re.fullmatch(r"[A-Z]{3}", code):
            raise ValueError(f"{value!r} is not a currency")
        return code
    if name == "gtin":
        found = gtin(str(value))
        if found is None:
            raise ValueError(f"{value!r} is not a GTIN (8, 12, 13 or 14 digits, check digit)")
        return found
    return str(value)


def item_value(name: str, value: Value, url: str) -> Value:
    """An item field's value: text, a decimal (price, number), a boolean (present) or a list;
    fields named ``url`` or ending in ``_url`` / ``_urls`` are made absolute."""
    if value is None or value == "":
        return None
    if name == "url" or name.endswith(("_url", "_urls")):
        if isinstance(value, list):
            return [absolute_url(str(v), url) for v in value if str(v)]
        return absolute_url(str(value), url)
    return value


def _number(text: str) -> Decimal | None:
    match = _NUMBER.search(text.replace("\u00a0", "").replace(" ", ""))
    if match is None:
        return None
    digits = match.group(0).replace(",", ".")
    try:
        return Decimal(digits)
    except InvalidOperation:
        return None


# -- steps ---------------------------------------------------------------------------------


def _each(fn: Callable[[str], Value]) -> Callable[[Value], Value]:
    def step(value: Value) -> Value:
        if isinstance(value, list):
            return [r for v in value if isinstance(r := fn(v), str)]
        return fn(value) if isinstance(value, str) else value

    return step


def _regex(pattern: str, where: str) -> Callable[[Value], Value]:
    try:
        compiled = re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise InvalidRequest(
            f"{where}: {pattern!r} is not a linear-time (RE2) pattern: {reason}; "
            "backreferences and lookarounds are refused",
            field=where,
        ) from None

    def first(text: str) -> str | None:
        match = compiled.search(text)
        if match is None:
            return None
        found: str | None = match.group(1) if compiled.groups else match.group(0)
        return found

    return _each(first)


def _join(separator: str) -> Callable[[Value], Value]:
    def step(value: Value) -> Value:
        return separator.join(str(v) for v in value) or None if isinstance(value, list) else value

    return step


def _plain(name: str) -> Callable[[Value], Value]:
    if name == "strip":
        return _each(clean)
    if name == "lower":
        return _each(str.lower)
    if name == "price":
        return _each(parse_price)
    if name == "number":
        return _each(_number)
    return lambda value: bool(value) if not isinstance(value, bool) else value  # present


def _step(raw: Any, where: str) -> Callable[[Value], Value]:
    if isinstance(raw, str) and raw in STEPS and raw not in ("join", "regex"):
        return _plain(raw)
    if isinstance(raw, dict) and len(raw) == 1:
        [(name, arg)] = raw.items()
        if name == "join" and isinstance(arg, str) and len(arg) <= 20:
            return _join(arg)
        if name == "regex" and isinstance(arg, str) and 0 < len(arg) <= MAX_EXPR:
            return _regex(arg, f"{where}.regex")
    raise InvalidRequest(
        f"{where}: {raw!r} is not a step (strip, lower, price, number, present, "
        '{"join": "sep"} or {"regex": "pattern"})',
        field=where,
    )


# -- compiling -------------------------------------------------------------------------------


def compile_target(kind: str, expr: str, where: str) -> Any:
    if kind == "css":
        try:
            LexborHTMLParser("<p></p>").css(expr)
        except Exception as exc:  # selectolax's own error type varies by version
            raise InvalidRequest(
                f"{where}: {expr!r} is not a CSS selector: {exc}", field=where
            ) from None
        return expr
    if kind == "xpath":
        try:
            return etree.XPath(expr, smart_strings=False)
        except (etree.XPathError, ValueError) as exc:  # ValueError: control characters
            raise InvalidRequest(f"{where}: {expr!r} is not an XPath: {exc}", field=where) from None
    if kind == "json":
        if not _JSON_PATH.match(expr):
            raise InvalidRequest(
                f"{where}: {expr!r} is not a JSON path (key.key.0.key: dotted keys, numbers "
                "index lists)",
                field=where,
            )
        return expr
    match = _JSONLD.match(expr)
    if match is None:
        raise InvalidRequest(
            f"{where}: {expr!r} is not a JSON-LD path ([Type:]key.key.0.key)", field=where
        )
    return match.group(1), tuple(match.group(2).split("."))


def compile_rule(name: str, raw: Any, *, item_of: str | None = None) -> Rule:
    """A product field's rule; with ``item_of`` (the block's kind), an item field's: css,
    xpath or json as the block is, read inside it, or neither (the block itself)."""
    if item_of is None and name not in (*EXTRACTED_FIELDS, LINKS):
        raise InvalidRequest(
            f"{name}: not a product field (one of {', '.join(EXTRACTED_FIELDS)}, or items)",
            field=name,
        )
    if not isinstance(raw, dict):
        raise InvalidRequest(f'{name}: a rule is an object like {{"css": "h1"}}', field=name)
    kinds = [k for k in _KINDS if k in raw]
    unknown = sorted(set(raw) - {*_KINDS, "attr", "all", "post"})
    if unknown:
        raise InvalidRequest(f"{name}: unknown key {unknown[0]!r}", field=f"{name}.{unknown[0]}")
    if item_of is not None and len(kinds) == 0:
        kind, expr = SELF, ""
    elif item_of is not None and kinds != [item_of]:
        raise InvalidRequest(
            f"{name}: inside a block matched by {item_of}, a rule uses {item_of} (or neither: "
            "the block itself)",
            field=name,
        )
    elif len(kinds) != 1:
        raise InvalidRequest(f"{name}: give exactly one of css, xpath, jsonld and json", field=name)
    else:
        kind, expr = kinds[0], raw[kinds[0]]
    where = f"{name}.{kind}"
    if kind != SELF and (not isinstance(expr, str) or not 0 < len(expr.strip()) <= MAX_EXPR):
        raise InvalidRequest(f"{where}: must be a text of 1 to {MAX_EXPR} characters", field=where)
    attr = raw.get("attr")
    css_like = kind == "css" or (kind == SELF and item_of == "css")
    if attr is not None and (not css_like or not isinstance(attr, str) or not _ATTR.match(attr)):
        raise InvalidRequest(f"{name}.attr: an attribute name, with css only", field=f"{name}.attr")
    every = raw.get("all", False)
    if not isinstance(every, bool):
        raise InvalidRequest(f"{name}.all: must be true or false", field=f"{name}.all")
    post = raw.get("post", [])
    if not isinstance(post, list) or len(post) > MAX_STEPS:
        raise InvalidRequest(
            f"{name}.post: a list of at most {MAX_STEPS} steps", field=f"{name}.post"
        )
    steps = tuple(_step(step, f"{name}.post.{i}") for i, step in enumerate(post))
    field_name = name.rsplit(".", 1)[-1]
    if kind == SELF:
        return Rule(field_name, kind, "", attr, every, steps, None)
    if kind == "xpath" and item_of == "xpath" and not expr.strip().startswith("."):
        raise InvalidRequest(
            f"{where}: inside a block an XPath starts with '.' (e.g. .//h2), else it reads "
            "the whole page",
            field=where,
        )
    return Rule(
        field_name, kind, expr, attr, every, steps, compile_target(kind, expr.strip(), where)
    )
