"""Selector parsers on the wire: a map of product fields to rules, its versions, previews."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forager.api.wire import MAX_JSON_ID, JsonBody
from forager.domains.comparison import MAX_PAGES, Verdict
from forager.parse.base import EXTRACTED_FIELDS
from forager.parse.items import KIND
from forager.parse.jsonpath import JSON_PATH
from forager.parse.selectors import FALLBACK, ITEM_FIELD, ITEMS, MAX_ITEM_FIELDS, MAX_ITEM_SPECS

# Whether a selector parses is its grammar's to say (no JSON Schema states CSS or XPath): each
# field says so in words, and a 422 names the field and the parser's reason.
_TEXT = {"type": "string", "minLength": 1, "maxLength": 500}
_CSS = {**_TEXT, "description": "A CSS selector that parses; one that does not is refused (422)."}
_XPATH = {
    **_TEXT,
    "description": "An XPath 1.0 expression that compiles; one that does not is refused (422).",
}

_RULE = {
    "type": "object",
    "description": 'Exactly one of "css", "xpath", "jsonld", "json" (a dotted path into a '
    'JSON response, e.g. "data.product.price"); optional "attr" (css only), '
    '"all" (every match) and "post" (steps: strip, lower, price, number, present, '
    '{"join": sep}, {"regex": RE2 pattern}). A selector, JSON-LD path or regex its engine '
    "cannot run is refused (422 naming it).",
    "properties": {
        "css": _CSS,
        "xpath": _XPATH,
        "jsonld": {"type": "string", "minLength": 1, "maxLength": 500},
        "json": {"type": "string", "pattern": JSON_PATH, "maxLength": 500},
        "attr": {"type": "string", "minLength": 1, "maxLength": 100},
        "all": {"type": "boolean"},
        "post": {"type": "array", "maxItems": 8, "items": {}},
    },
    "additionalProperties": False,
}
_ITEM_RULE = {
    **_RULE,
    "description": 'Read inside the block: "css", "xpath" or "json" as the block (an XPath '
    'starting with "."), or neither to read the block itself; optional "attr", "all" and '
    '"post" as in a product rule.',
    "properties": {k: v for k, v in _RULE["properties"].items() if k != "jsonld"},  # type: ignore[attr-defined]
}
_ITEMS_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_ITEM_SPECS,
    "description": "Item extractors: one item of `kind` per block `each` matches, identified "
    "by the value of its field `key` (docs/PARSERS.md, Items).",
    "items": {
        "type": "object",
        "required": ["kind", "each", "key", "fields"],
        "properties": {
            "kind": {"type": "string", "pattern": KIND, "examples": ["ad"]},
            "each": {
                "type": "object",
                "minProperties": 1,
                "maxProperties": 1,
                "properties": {
                    "css": _CSS,
                    "xpath": _XPATH,
                    "json": {"type": "string", "pattern": JSON_PATH, "maxLength": 500},
                },
                "additionalProperties": False,
            },
            "key": {"type": "string", "pattern": ITEM_FIELD, "examples": ["url"]},
            "fields": {
                "type": "object",
                "minProperties": 1,
                "maxProperties": MAX_ITEM_FIELDS,
                "propertyNames": {"pattern": ITEM_FIELD},
                "additionalProperties": _ITEM_RULE,
            },
        },
        "additionalProperties": False,
    },
}
EXAMPLE_ITEMS: list[dict[str, Any]] = [
    {
        "kind": "ad",
        "each": {"css": ".ad"},
        "key": "url",
        "fields": {
            "url": {"css": "a", "attr": "href"},
            "title": {"css": "h2"},
            "price": {"css": ".price", "post": ["price"]},
        },
    }
]
EXAMPLE_FIELDS: dict[str, Any] = {
    "product_name": {"css": ".product_main h1"},
    "price": {"css": ".product_main .price_color", "post": ["price"]},
    "sku": {"xpath": "//table//tr[th='UPC']/td"},
    "brand": {"jsonld": "Product:brand.name"},
    "category": {"css": "ul.breadcrumb li a", "all": True, "post": [{"join": " > "}]},
    "is_available": {"css": ".availability", "post": [{"regex": "(?i)in stock"}, "present"]},
}
_FIELDS_DOC = (
    "Product field -> rule (docs/PARSERS.md), and/or `items`: item extractors (ads, "
    "listings). A rule the engines cannot run (CSS, XPath, JSON-LD path, a regex that is not "
    "linear-time RE2) is refused with 422 naming it. Product fields without a rule come from "
    "the generic parser's record of the page unless `fallback` is false."
)
_FALLBACK_SCHEMA = {
    "type": "boolean",
    "default": True,
    "description": "Whether product fields without a rule are taken from the generic parser "
    "(true) or stay empty (false).",
}


def _fields_schema(schema: dict[str, Any]) -> None:
    schema.update(
        type="object",
        minProperties=1,
        maxProperties=len(EXTRACTED_FIELDS) + 2,
        anyOf=[
            {"required": ["product_name"]},
            {"required": [ITEMS], "propertyNames": {"enum": [ITEMS, FALLBACK]}},
        ],
        propertyNames={"enum": [*EXTRACTED_FIELDS, ITEMS, FALLBACK]},
        properties={ITEMS: _ITEMS_SCHEMA, FALLBACK: _FALLBACK_SCHEMA},
        additionalProperties=_RULE,
        examples=[EXAMPLE_FIELDS, {ITEMS: EXAMPLE_ITEMS}],
    )


class SelectorMapIn(JsonBody):
    """A selector map to save as the domain's next version."""

    fields: dict[str, Any] = Field(description=_FIELDS_DOC, json_schema_extra=_fields_schema)
    note: str | None = Field(
        None, max_length=500, description="What changed.", examples=["price from .price_color"]
    )
    use: bool = Field(True, description="Parse the domain's pages with it from now on.")


class SelectorPreviewIn(JsonBody):
    """An unsaved selector map, run on one stored page of the domain."""

    fields: dict[str, Any] = Field(description=_FIELDS_DOC, json_schema_extra=_fields_schema)
    task_id: int = Field(
        ge=1, le=MAX_JSON_ID, description="A task of this domain with a stored page.", examples=[1]
    )


class SelectorParserPublic(BaseModel):
    """One saved version of a domain's selector map."""

    model_config = ConfigDict(from_attributes=True)

    id: int = Field(examples=[1])
    domain_id: int = Field(examples=[1])
    version: int = Field(description="1, 2, … per domain; every save is a new one.", examples=[2])
    fields: dict[str, Any] = Field(examples=[EXAMPLE_FIELDS])
    note: str | None = Field(examples=["price from .price_color"])
    created_by: str = Field(examples=["api"])
    created_at: datetime
    in_use: bool = Field(description="Whether the domain's pages are parsed with it.")


class SelectorParserList(BaseModel):
    """A domain's versions, newest first."""

    items: list[SelectorParserPublic]
    total: int
    limit: int
    offset: int
    in_use: int | None = Field(description="The version in use (null: none).", examples=[2])


class StoredPagePublic(BaseModel):
    """A page of the domain in the page store, by the task that fetched it."""

    model_config = ConfigDict(from_attributes=True)

    task_id: int = Field(examples=[1])
    url: str = Field(examples=["https://books.toscrape.com/catalogue/a/index.html"])
    fetched_at: datetime | None


class SelectorPreview(BaseModel):
    """What the map reads from the page: each field's value (null: nothing) and its error."""

    task_id: int = Field(examples=[1])
    url: str = Field(examples=["https://books.toscrape.com/catalogue/a/index.html"])
    values: dict[str, Any] = Field(
        examples=[{"product_name": "A Light in the Attic", "price": "51.77", "brand": None}]
    )
    items: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The items the map's item extractors read: kind, key and data each.",
        examples=[[{"kind": "ad", "key": "https://shop.example/ad/1", "data": {"title": "Bike"}}]],
    )
    errors: dict[str, str] = Field(
        description="Per field: why it has no value although the rule matched (item fields: "
        "items.0.fields.price).",
        examples=[{"category": 'gives 3 values: add a join step or drop "all"'}],
    )
    error: str | None = Field(
        description="Why the page could not be read at all (a parse error, over time).",
        examples=[None],
    )


class SelectorCompareIn(JsonBody):
    """A candidate selector map, to read the domain's newest stored pages with it and with the
    parser in use."""

    fields: dict[str, Any] = Field(description=_FIELDS_DOC, json_schema_extra=_fields_schema)
    pages: int = Field(
        MAX_PAGES, ge=1, le=MAX_PAGES, description="How many of the newest stored pages to read."
    )


class FieldDiffPublic(BaseModel):
    """One field of one page by the current parser and by the candidate."""

    model_config = ConfigDict(from_attributes=True)

    field: str = Field(examples=["availability"])
    current: Any = Field(examples=["InStock"])
    candidate: Any = Field(examples=[None])
    verdict: Verdict = Field(
        description="added: only the candidate has a value; lost: only the current parser; "
        "changed: both, different; same: both, equal.",
        examples=["lost"],
    )


class PageComparisonPublic(BaseModel):
    """One stored page read by both parsers: the fields either filled."""

    model_config = ConfigDict(from_attributes=True)

    task_id: int = Field(examples=[1])
    url: str = Field(examples=["https://books.toscrape.com/catalogue/a/index.html"])
    current_error: str | None = Field(
        description="Why the current parser read no product from the page.", examples=[None]
    )
    candidate_error: str | None = Field(
        description="Why the candidate read no product from the page.", examples=[None]
    )
    fields: list[FieldDiffPublic]


class FieldSummaryPublic(BaseModel):
    """One field over the pages read: on how many the candidate adds, changes, loses, keeps it."""

    model_config = ConfigDict(from_attributes=True)

    field: str = Field(examples=["availability"])
    added: int = Field(examples=[0])
    changed: int = Field(examples=[0])
    lost: int = Field(examples=[3])
    same: int = Field(examples=[0])


class SelectorComparison(BaseModel):
    """A candidate map against the domain's parser in use, on the same stored pages."""

    current_parser: str = Field(
        description="The parser the domain's pages are read with now.", examples=["generic"]
    )
    current_version: int | None = Field(
        description="The selector map version in use (null: not a selector map).", examples=[None]
    )
    fields: list[FieldSummaryPublic] = Field(
        description="Per field either parser filled on some page, in record order."
    )
    lost: list[str] = Field(
        description="The fields the candidate loses on at least one page.",
        examples=[["availability"]],
    )
    pages: list[PageComparisonPublic] = Field(description="The pages read, newest fetch first.")
