"""Selector parsers: a product and/or items read by a map of fields to rules, no code
(docs/PARSERS.md).

A map is ``{field: rule}`` for the fields of ``ProductRecord``; a rule is exactly one of
``{"css": "…"}`` (selectolax), ``{"xpath": "…"}`` (lxml) or ``{"jsonld": "[Type:]a.b.0.c"}``,
with optional ``"attr"`` (CSS: read an attribute instead of the text), ``"all": true`` (every
match, a list) and ``"post"``: steps applied in order — ``strip``, ``lower``, ``price``,
``number``, ``present``, ``{"join": " > "}``, ``{"regex": "…"}`` (RE2: linear time, no
backtracking constructs; the first group, else the whole match).

The rules themselves are ``forager.parse.selector_rules``. ``compile_map`` refuses a bad rule
with ``InvalidRequest`` naming it (``price.post.1.regex``) and the reason. Compiled maps are
pure and synchronous: they run in the parse processes.

The map's ``items`` key lists item extractors: ``{"kind": "ad", "each": {"css": ".ad"},
"key": "url", "fields": {name: rule}}`` gives one item per block ``each`` matches, its fields'
rules read inside the block (a rule with neither ``css`` nor ``xpath`` reads the block itself).

Its ``links`` key is one more rule, ``{"css": "a.next", "attr": "href"}`` say: every URL it
reads is a link a crawl job takes through its scope, rules and budgets (docs/DISCOVERY.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from forager.errors import InvalidRequest, NotProductPage, ParseError
from forager.parse.base import EXTRACTED_FIELDS, Extracted, ItemRecord, ProductRecord
from forager.parse.generic import GenericParser, is_available_from
from forager.parse.items import KIND, MAX_ITEMS, BadItem, check_item
from forager.parse.prices import currency_for_url
from forager.parse.quality import check
from forager.parse.selector_rules import (
    LINKS,
    MAX_EXPR,
    Page,
    Rule,
    Value,
    compile_rule,
    compile_target,
    item_value,
    product_value,
)

SELECTOR = "selector"  # the parser name of domains that use their selector map
MAX_FIELDS = len(EXTRACTED_FIELDS)
ITEMS = "items"  # the map's key for item extractors
FALLBACK = "fallback"  # the map's key: whether fields without a rule come from the generic parser
ITEM_FIELD = r"^[a-z][a-z0-9_]{0,49}$"
MAX_ITEM_SPECS = 5
MAX_ITEM_FIELDS = 30
_ITEM_FIELD = re.compile(ITEM_FIELD)
_KIND = re.compile(KIND)
_GENERIC = GenericParser()


@dataclass(frozen=True, slots=True)
class ItemSpec:
    """One compiled item extractor: a block rule, the key field and the fields' rules."""

    index: int
    kind: str
    each: Rule
    key: str
    rules: tuple[Rule, ...]


@dataclass(frozen=True, slots=True)
class SelectorMap:
    """A compiled map: ``extract`` gives every field's value and every field's error."""

    version: int
    rules: tuple[Rule, ...]
    source: dict[str, Any] = field(compare=False)
    items: tuple[ItemSpec, ...] = ()
    fallback: bool = True
    links: Rule | None = None  # the ``links`` rule: URLs a crawl job takes from the page

    def links_of(self, html: str) -> list[str]:
        """The URLs the ``links`` rule reads from the page (none without one)."""
        return self._links(Page(html))

    def _links(self, page: Page) -> list[str]:
        if self.links is None:
            return []
        try:
            raw = page.find(self.links)
            for step in self.links.steps:
                raw = step(raw)
        except (ValueError, ArithmeticError, etree.Error):
            return []
        values = raw if isinstance(raw, list) else [raw]
        return [str(v).strip() for v in values if isinstance(v, str) and v.strip()]

    @property
    def undefined(self) -> tuple[str, ...]:
        """The product fields taken from the generic parser (none without fallback)."""
        if not self.fallback or not self.rules:
            return ()
        defined = {rule.field for rule in self.rules}
        return tuple(name for name in EXTRACTED_FIELDS if name not in defined)

    def extract(self, html: str, url: str) -> tuple[dict[str, Value], dict[str, str]]:
        """Every product field's value and error; with item extractors, ``values["items"]``
        is the items read (``{"kind", "key", "data"}``) and their errors are keyed
        ``items.0.fields.price`` (the rule's place in the map)."""
        page = Page(html)
        values, errors = self._fields(page, url)
        if self.items:
            found, item_errors = self._items(page, url)
            listed: Any = [{"kind": i.kind, "key": i.key, "data": i.data} for i in found]
            values[ITEMS] = listed
            errors.update(item_errors)
        return values, errors

    def _fields(self, page: Page, url: str) -> tuple[dict[str, Value], dict[str, str]]:
        values: dict[str, Value] = {}
        errors: dict[str, str] = {}
        for rule in self.rules:
            try:
                raw = page.find(rule)
                for step in rule.steps:
                    raw = step(raw)
                values[rule.field] = product_value(rule.field, raw, url)
            except (ValueError, ArithmeticError, etree.Error) as exc:
                errors[rule.field] = str(exc)
                values[rule.field] = None
        return values, errors

    def parse(self, html: str, url: str) -> ProductRecord | Extracted:
        """The product the map reads (NotProductPage when ``product_name`` matched nothing);
        with item extractors, an ``Extracted`` with the product (or None) and the items."""
        page = Page(html)
        if not self.items and self.links is None:
            return self._product(page, html, url)
        if not self.items:
            return Extracted(self._product(page, html, url), [], self._links(page))
        found, _ = self._items(page, url)
        items = [ItemRecord(i.kind, i.key, i.data) for i in found]
        product = None
        if self.rules:
            try:
                product = self._product(page, html, url)
            except NotProductPage:
                if not items:
                    raise
        if product is None and not items:
            raise NotProductPage(f"{url}: selector map v{self.version}: no item matched")
        return Extracted(product, items, self._links(page))

    def _product(self, page: Page, html: str, url: str) -> ProductRecord:
        values, errors = self._fields(page, url)
        name = values.get("product_name")
        if not isinstance(name, str) or not name:
            why = errors.get("product_name", "matched nothing")
            raise NotProductPage(f"{url}: selector map v{self.version}: product_name {why}")
        record = ProductRecord(url=url, product_name=name)
        for key, value in values.items():
            if key != "product_name" and value is not None:
                setattr(record, key, value)
        taken = _fall_back(record, self.undefined, html, url)
        if record.is_available is None and "is_available" not in values:
            record.is_available = is_available_from(record.availability)
        if record.currency is None and record.price is not None:
            record.currency = currency_for_url(url)
        record.parser_name, record.parser_version = SELECTOR, str(self.version)
        confidence = {k: v for k, v in taken.items() if getattr(record, k) not in (None, [])}
        checked = check(record, dict.fromkeys(values, "markup"))
        checked.field_confidence.update(confidence)
        checked.quality_issues.extend(f"selector:{k}: {v}" for k, v in errors.items())
        return checked

    def _items(self, page: Page, url: str) -> tuple[list[Any], dict[str, str]]:
        """The items of every extractor (checked, JSON-ready) and each field's first error."""
        found: list[Any] = []
        errors: dict[str, str] = {}
        seen: set[tuple[str, str]] = set()
        for spec in self.items:
            where = f"{ITEMS}.{spec.index}"
            for number, block in enumerate(page.blocks(spec.each), start=1):
                if len(found) >= MAX_ITEMS:
                    errors.setdefault(where, f"more than {MAX_ITEMS} items: the rest are left out")
                    break
                data: dict[str, Any] = {}
                for rule in spec.rules:
                    try:
                        raw = page.find_in(block, rule)
                        for step in rule.steps:
                            raw = step(raw)
                        data[rule.field] = item_value(rule.field, raw, url)
                    except (ValueError, ArithmeticError, etree.Error) as exc:
                        errors.setdefault(f"{where}.fields.{rule.field}", f"block {number}: {exc}")
                        data[rule.field] = None
                key = data.get(spec.key)
                if key is None or key == "" or key == []:
                    errors.setdefault(f"{where}.key", f"block {number}: {spec.key} is empty")
                    continue
                text = " ".join(map(str, key)) if isinstance(key, list) else str(key)
                try:
                    item = check_item(ItemRecord(spec.kind, text, data), len(found))
                except BadItem as exc:
                    errors.setdefault(f"{where}.key", f"block {number}: {exc.message}")
                    continue
                if (item.kind, item.key) not in seen:
                    seen.add((item.kind, item.key))
                    found.append(item)
        return found, errors


def _fall_back(
    record: ProductRecord, names: tuple[str, ...], html: str, url: str
) -> dict[str, float]:
    """Fill ``names`` from the generic parser's record of the page; the confidence of each
    field taken (a page the generic parser refuses gives nothing)."""
    if not names:
        return {}
    try:
        generic = _GENERIC.parse(html, url)
    except ParseError:
        return {}
    taken: dict[str, float] = {}
    for name in names:
        value = getattr(generic, name)
        if value is not None and value != []:
            setattr(record, name, value)
            taken[name] = generic.field_confidence.get(name, 0.5)
    return taken


# -- compiling -------------------------------------------------------------------------------


def _item_spec(index: int, raw: Any) -> ItemSpec:
    where = f"{ITEMS}.{index}"
    if not isinstance(raw, dict):
        raise InvalidRequest(
            f'{where}: an item extractor is {{"kind", "each", "key", "fields"}}', field=where
        )
    unknown = sorted(set(raw) - {"kind", "each", "key", "fields"})
    if unknown:
        raise InvalidRequest(f"{where}: unknown key {unknown[0]!r}", field=f"{where}.{unknown[0]}")
    kind = raw.get("kind")
    if not isinstance(kind, str) or not _KIND.match(kind):
        raise InvalidRequest(
            f"{where}.kind: a name like ad or listing ({KIND})", field=f"{where}.kind"
        )
    each = raw.get("each")
    kinds = [k for k in ("css", "xpath", "json") if isinstance(each, dict) and k in each]
    if not isinstance(each, dict) or len(kinds) != 1 or len(each) != 1:
        raise InvalidRequest(
            f'{where}.each: the blocks, one item each: {{"css": "…"}}, {{"xpath": "…"}} or '
            '{"json": "…"} (a list in a JSON response)',
            field=f"{where}.each",
        )
    expr = each[kinds[0]]
    if not isinstance(expr, str) or not 0 < len(expr.strip()) <= MAX_EXPR:
        raise InvalidRequest(
            f"{where}.each.{kinds[0]}: must be a text of 1 to {MAX_EXPR} characters",
            field=f"{where}.each.{kinds[0]}",
        )
    target = compile_target(kinds[0], expr.strip(), f"{where}.each.{kinds[0]}")
    block = Rule("each", kinds[0], expr, None, True, (), target)
    fields = raw.get("fields")
    if not isinstance(fields, dict) or not 1 <= len(fields) <= MAX_ITEM_FIELDS:
        raise InvalidRequest(
            f"{where}.fields: map 1 to {MAX_ITEM_FIELDS} field names to rules",
            field=f"{where}.fields",
        )
    for name in fields:
        if not isinstance(name, str) or not _ITEM_FIELD.match(name):
            raise InvalidRequest(
                f"{where}.fields: {name!r} is not a field name ({ITEM_FIELD})",
                field=f"{where}.fields",
            )
    key = raw.get("key")
    if not isinstance(key, str) or key not in fields:
        raise InvalidRequest(
            f"{where}.key: the name of the field that identifies an item (one of "
            f"{', '.join(fields)})",
            field=f"{where}.key",
        )
    rules = tuple(
        compile_rule(f"{where}.fields.{name}", rule, item_of=kinds[0])
        for name, rule in fields.items()
    )
    return ItemSpec(index, kind, block, key, rules)


def compile_map(fields: Any, version: int = 0) -> SelectorMap:
    """The compiled map, or ``InvalidRequest`` naming the first bad rule and why."""
    if (
        not isinstance(fields, dict)
        or not 1 <= len(set(fields) - {FALLBACK, LINKS}) <= MAX_FIELDS + 1
    ):
        raise InvalidRequest(
            f"fields: map 1 to {MAX_FIELDS} product fields to rules (and items)", field="fields"
        )
    specs = fields.get(ITEMS)
    fallback = fields.get(FALLBACK, True)
    if not isinstance(fallback, bool):
        raise InvalidRequest(
            "fields.fallback: true (fields without a rule come from the generic parser) or "
            "false (they stay empty)",
            field="fields.fallback",
        )
    product = {k: v for k, v in fields.items() if k not in (ITEMS, FALLBACK, LINKS)}
    if "product_name" not in product and (specs is None or product):
        raise InvalidRequest(
            "fields: product_name needs a rule (a product has a name), unless the map only "
            "reads items",
            field="fields",
        )
    try:
        rules = tuple(compile_rule(name, raw) for name, raw in product.items())
        if specs is not None and (
            not isinstance(specs, list) or not 1 <= len(specs) <= MAX_ITEM_SPECS
        ):
            raise InvalidRequest(
                f"{ITEMS}: a list of 1 to {MAX_ITEM_SPECS} item extractors", field=ITEMS
            )
        items = tuple(_item_spec(i, raw) for i, raw in enumerate(specs or []))
        links: Rule | None = None
        if LINKS in fields:  # every link the rule matches, ``all`` or not
            links = dataclasses.replace(compile_rule(LINKS, fields[LINKS]), all=True)
    except InvalidRequest as exc:  # named from the request body's root
        raise InvalidRequest(f"fields.{exc.message}", field=f"fields.{exc.field}") from None
    return SelectorMap(version, rules, fields, items, fallback, links)


_CACHE: OrderedDict[tuple[int, int], SelectorMap] = OrderedDict()
_CACHE_SIZE = 256


def cached_map(domain_id: int, version: int, fields: dict[str, Any]) -> SelectorMap:
    """The compiled map of a domain's version, compiled once per process (an unsaved one,
    version 0, every time)."""
    if version < 1:
        return compile_map(fields, version)
    key = (domain_id, version)
    found = _CACHE.get(key)
    if found is None:
        found = _CACHE[key] = compile_map(fields, version)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return found


class SelectorParser:
    """The ``selector`` entry of the registry: a domain's own map runs in its place; a domain
    set to ``selector`` without a saved map fails its pages saying so."""

    name = SELECTOR
    version = "map"
    hosts: tuple[str, ...] = ()

    def parse(self, html: str, url: str) -> ProductRecord:
        raise ParseError(
            f"{url}: the domain's parser is 'selector' but it has no saved selector map "
            "(POST /api/domains/{id}/selector-parsers)"
        )
