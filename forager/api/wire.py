"""Input types that accept exactly what the OpenAPI description says they accept.

Pydantic's lax mode takes ``true`` for an integer, ``"1"`` for a number in a JSON body and
``0.5`` (a Unix time) for a date-time; the description promises none of that, and a client
built from it must not learn the server is looser than its contract. So request bodies use:

- ``JsonBody``: request bodies whose integer, number and boolean fields take only JSON
  integers (``3`` or ``3.0``, as JSON Schema counts), numbers and true/false: never a bool
  for a number or text for either;
- ``Timestamp``: an ISO 8601 date-time with a time zone, never a number (query and body);
- ``Day``: an ISO 8601 date (``2026-11-26``), never a number (query and body);
- ``QueryMoney`` / ``BodyMoney``: a non-negative amount, rounded to cents;
- ``CrawlURL``, ``Tag`` / ``Tags``, ``VersionText``: text with a documented shape (``Shape``),
  shared by several resources' bodies.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import core_schema

from forager.errors import InvalidURL
from forager.products.tags import MAX_TAGS, TAG
from forager.queue.urls import normalize_url

# Ids in bodies stay within JSON's exact integers (2**53 - 1): a larger one written as a JSON
# number may be rounded by the client's parser past the 64-bit range.
MAX_JSON_ID = 2**53 - 1
MAX_MONEY = Decimal("999999999999.99")  # NUMERIC(14, 2)
_CENTS = Decimal("0.01")
_NUMBER = re.compile(r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$")
_MONEY_TEXT = r"^[0-9]{1,12}(\.[0-9]{1,2})?$"


def _kind(annotation: Any) -> tuple[str | None, bool]:
    """The JSON kind a field holds (integer, number, boolean) and whether it is a list of it."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, UnionType):
        kinds = {_kind(arg) for arg in get_args(annotation) if arg is not type(None)}
        kinds.discard((None, False))  # None itself
        return kinds.pop() if len(kinds) == 1 else (None, False)
    if get_origin(annotation) is list:
        inner, _ = _kind(get_args(annotation)[0])
        return inner, True
    return {bool: "boolean", int: "integer", float: "number"}.get(annotation), False


def _wrong_kind(kind: str, value: Any) -> bool:
    if value is None:
        return False
    if kind == "boolean":
        return not isinstance(value, bool)
    return isinstance(value, bool) or not isinstance(value, int | float)


class JsonBody(BaseModel):
    """A request body: no unknown fields, and JSON kinds taken as the description says."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _json_kind(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        kind, many = _kind(field.annotation) if field is not None else (None, False)
        values = value if many and isinstance(value, list) else [value]
        if kind is not None and any(_wrong_kind(kind, v) for v in values):
            raise ValueError(f"expected a JSON {kind}{' list' if many else ''}")
        return value


def _iso_only(value: Any) -> Any:
    """Refuse numbers (and number-looking text) where a date-time is wanted."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or _NUMBER.match(value.strip()):
        raise ValueError(
            "expected an ISO 8601 date-time with a time zone, e.g. 2026-11-26T09:30:00Z"
        )
    return value


def _money(value: Any, *, text_allowed: bool) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ValueError("expected a number")
    if isinstance(value, str):
        pattern = _MONEY_TEXT if text_allowed else _NUMBER.pattern
        if not re.match(pattern, value):
            raise ValueError("expected a decimal number like 12.50")
    try:
        amount = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation as exc:
        raise ValueError("expected a decimal number like 12.50") from exc
    if not amount.is_finite() or not 0 <= amount <= MAX_MONEY:
        raise ValueError(f"expected an amount between 0 and {MAX_MONEY}")
    return amount.quantize(_CENTS, rounding=ROUND_HALF_EVEN)


def _iso_day(value: Any) -> Any:
    """Refuse numbers (a Unix time) and anything but YYYY-MM-DD where a date is wanted."""
    if isinstance(value, date):
        return value
    if not isinstance(value, str) or not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        raise ValueError("expected an ISO 8601 date, e.g. 2026-11-26")
    return value


Timestamp = Annotated[AwareDatetime, BeforeValidator(_iso_only)]
Day = Annotated[date, BeforeValidator(_iso_day)]
_MONEY_NUMBER = {"type": "number", "minimum": 0, "maximum": float(MAX_MONEY)}
QueryMoney = Annotated[
    Decimal,
    BeforeValidator(lambda v: _money(v, text_allowed=False)),
    WithJsonSchema(_MONEY_NUMBER),
]
BodyMoney = Annotated[
    Decimal,
    BeforeValidator(lambda v: _money(v, text_allowed=True)),
    WithJsonSchema({"anyOf": [_MONEY_NUMBER, {"type": "string", "pattern": _MONEY_TEXT}]}),
]


# -- text with a documented shape -------------------------------------------------------
# Patterns are checked here with Python's ``re.search``, as JSON Schema tools in Python read
# them; ``(?![\s\S])`` ends them at the true end of the text (``$`` would also match before a
# final newline).
END = r"(?![\s\S])"
LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST = rf"{LABEL}(?:\.{LABEL})*"
PORT = r"0*(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
HTTP = r"[Hh][Tt][Tt][Pp][Ss]?://"
_URL_TAIL = r"[^\s\x00-\x1f\x7f]"
HOST_NAME = rf"^{HOST}{END}"
# Spaces around a submitted URL are trimmed (as a paste from a spreadsheet has them).
CRAWL_URL = rf"^\s*{HTTP}{HOST}(?::(?:{PORT})?)?(?:[/?#]{_URL_TAIL}*)?\s*{END}"
SITE_URL = rf"^{HTTP}{HOST}(?::(?:{PORT})?)?(?:/[^\s?#\x00-\x1f\x7f]*)?{END}"


@dataclass(frozen=True, slots=True)
class Shape:
    """``Annotated[str, Shape(pattern, what, max_length)]``: a string with a documented
    pattern and length, refused when it does not match them, naming ``what`` or, when
    ``explain`` has one, the precise reason."""

    pattern: str
    what: str
    max_length: int
    explain: Callable[[str], str | None] | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        compiled = re.compile(self.pattern)

        def check(value: Any) -> Any:
            if isinstance(value, str) and not (
                len(value) <= self.max_length and compiled.search(value)
            ):
                reason = self.explain(value) if self.explain else None
                raise ValueError(
                    reason or f"expected {self.what} (at most {self.max_length} characters)"
                )
            return value

        return core_schema.no_info_before_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: GetJsonSchemaHandler) -> Any:
        return {"type": "string", "pattern": self.pattern, "maxLength": self.max_length}


# What pydantic puts before the message of an error a validator raised: not the user's business.
_LIBRARY_PREFIXES = ("Value error, ", "Assertion failed, ")


def message_of(error: Any) -> str:
    """A validation error's message without the validation library's prefix."""
    message = str(error["msg"])
    for prefix in _LIBRARY_PREFIXES:
        message = message.removeprefix(prefix)
    return message


def _why_not_crawlable(url: str) -> str | None:
    """The normalizer's own reason for refusing ``url``, when it has one."""
    try:
        normalize_url(url)
    except InvalidURL as exc:
        return exc.message
    return None


CrawlURL = Annotated[
    str,
    Shape(
        CRAWL_URL,
        "an http(s) URL: scheme, host name, optional port and path",
        2047,
        explain=_why_not_crawlable,
    ),
]
Tag = Annotated[
    str,
    Shape(
        TAG,
        "a tag: 1-50 lowercase letters, digits, -, _, . or :, starting with a letter or digit",
        50,
    ),
]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
VersionText = Annotated[str, Shape(r"^[A-Za-z0-9_.-]+(?![\s\S])", "a version like 2.1", 50)]


def without_null(*names: str, also: dict[str, Any] | None = None) -> Any:
    """``json_schema_extra`` for a body whose ``names`` (all fields when none are named) may be
    left out but never null, as its validators say; ``also`` adds keywords to the body."""

    def extra(schema: dict[str, Any]) -> None:
        schema.update(also or {})
        for name in names or list(schema.get("properties", {})):
            field = schema.get("properties", {}).get(name, {})
            variants = [v for v in field.pop("anyOf", []) if v != {"type": "null"}]
            if len(variants) == 1:
                field.update(variants[0])
            elif variants:
                field["anyOf"] = variants
            if field.get("default", 0) is None:
                del field["default"]

    return extra


def choice_of(names: Any) -> Any:
    """``json_schema_extra`` that lists the allowed values when the description is built
    (parsers are plugins: known only at run time); null stays allowed."""

    def extra(schema: dict[str, Any]) -> None:
        schema["enum"] = [*names(), None]

    return extra
