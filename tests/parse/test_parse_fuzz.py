"""Property-based fuzzing of the parsers, the classifier and price parsing (hypothesis).

Whatever the page, a parser returns a well-formed ``ProductRecord`` or raises a ``ParseError``;
records and errors survive pickling (parsing runs in a worker process).
"""

from __future__ import annotations

import json
import pickle
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forager.errors import ParseError
from forager.parse.base import ProductRecord
from forager.parse.classify import classify, looks_like_product
from forager.parse.prices import detect_currency, parse_price, to_decimal
from forager.parse.registry import get_parser, parser_names

FUZZ = settings(
    max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

# Scalars that shops put in structured data, good and broken.
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308]),
    st.text(max_size=30),
    st.sampled_from(["12.99", "1.299,90", "R$ 1.299,90", "1e400", "-0", "InStock", "EUR", "", " "]),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "@type",
                    "name",
                    "offers",
                    "price",
                    "lowPrice",
                    "priceCurrency",
                    "availability",
                    "sku",
                    "mpn",
                    "brand",
                    "image",
                    "aggregateRating",
                    "ratingValue",
                    "bestRating",
                    "reviewCount",
                    "description",
                    "@graph",
                    "priceSpecification",
                    "category",
                    "itemListElement",
                    "isRelatedTo",
                ]
            ),
            st.one_of(inner, st.just("Product"), st.just("Offer")),
            max_size=6,
        ),
    ),
    max_leaves=20,
)
_ATTR_TEXT = st.text(alphabet=st.characters(blacklist_characters='"'), max_size=40)


@st.composite
def _element(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["json-ld", "meta", "microdata", "tag", "text", "price", "img"]))
    if kind == "json-ld":
        data = draw(st.one_of(_JSON, _JSON.map(lambda v: {"@type": "Product", "x": v})))
        body = json.dumps(data, default=str) if draw(st.booleans()) else draw(st.text())
        return f'<script type="application/ld+json">{body}</script>'
    if kind == "meta":
        key = draw(
            st.sampled_from(
                [
                    "og:title",
                    "og:type",
                    "product:price:amount",
                    "og:image",
                    "product:price:currency",
                    "og:price:standard_amount",
                    "product:availability",
                    "og:description",
                ]
            )
        )
        return f'<meta property="{key}" content="{draw(_ATTR_TEXT)}">'
    if kind == "microdata":
        prop = draw(st.sampled_from(["name", "price", "sku", "offers", "image", "brand"]))
        return (
            '<div itemscope itemtype="https://schema.org/Product">'
            f'<span itemprop="{prop}" content="{draw(_ATTR_TEXT)}">{draw(st.text(max_size=20))}'
            "</span></div>"
        )
    if kind == "tag":
        tag = draw(st.sampled_from(["h1", "title", "button", "del", "div", "span", "li", "a"]))
        cls = draw(st.sampled_from(["", "price", "related", "old-price", "breadcrumb", "sku"]))
        return f'<{tag} class="{cls}">{draw(st.text(max_size=30))}</{tag}>'
    if kind == "price":
        return f"<span>{draw(st.sampled_from(['€', '$', 'R$', 'Kč', '']))} {draw(_SCALARS)}</span>"
    if kind == "img":
        return f'<img alt="{draw(_ATTR_TEXT)}" src="{draw(_ATTR_TEXT)}">'
    return draw(st.text(max_size=50))


_PAGES = st.one_of(
    st.text(max_size=300),
    st.lists(_element(), max_size=12).map(lambda parts: "<html><body>" + "".join(parts)),
)
_URLS = st.sampled_from(
    ["https://shop.example/p/1", "https://www.amazon.com/dp/B0ABC12345", "http://shop.de/x", ""]
)


def _check_record(record: ProductRecord, parser: str) -> None:
    assert isinstance(record, ProductRecord)
    assert record.product_name and record.product_name.strip()
    for value in (record.price, record.original_price, record.rating):
        assert value is None or (isinstance(value, Decimal) and value.is_finite())
    assert record.review_count is None or isinstance(record.review_count, int)
    assert all(isinstance(url, str) for url in record.image_urls)
    assert record.parser_name == parser
    assert record.parser_version == get_parser(parser).version
    text = json.dumps(record.to_json())  # JSON-ready: decimals as strings, no floats
    assert "NaN" not in text and "Infinity" not in text
    assert not any(isinstance(v, float) for v in record.to_json().values())
    assert pickle.loads(pickle.dumps(record)) == record


@FUZZ
@given(html=_PAGES, url=_URLS, parser=st.sampled_from(parser_names()))
def test_parsers_return_a_record_or_raise_parse_error(html: str, url: str, parser: str) -> None:
    outcome: ProductRecord | ParseError
    try:
        outcome = get_parser(parser).parse(html, url)
    except ParseError as exc:
        outcome = exc
    if isinstance(outcome, ParseError):
        assert outcome.message
        assert pickle.loads(pickle.dumps(outcome)).message == outcome.message
    else:
        _check_record(outcome, parser)


@FUZZ
@given(html=_PAGES)
def test_classifier_answers_for_any_page(html: str) -> None:
    found = classify(html)
    assert found is None or (found[0] in {"captcha", "blocked"} and found[1])
    assert isinstance(looks_like_product(html), bool)


@FUZZ
@given(
    text=st.one_of(st.text(max_size=60), _SCALARS.map(str)),
    hint=st.sampled_from([None, "de", "en", "xx"]),
)
def test_price_parsing_never_raises(text: str, hint: str | None) -> None:
    value = parse_price(text, hint)
    assert value is None or (isinstance(value, Decimal) and value.is_finite())
    code = detect_currency(text, "https://shop.example.ca/")
    assert code is None or (len(code) == 3 and code.isupper())


@FUZZ
@given(value=_SCALARS)
def test_structured_numbers_are_decimal_or_none(value: object) -> None:
    number = to_decimal(value)
    assert number is None or (isinstance(number, Decimal) and number.is_finite())
