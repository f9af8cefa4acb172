"""Issue 33: JSON responses parsed. A selector map's ``json`` rules read an API's JSON answer
with the paths live monitors use (``data.product.price.amount``, numbers index lists), into a
product and items; a JSON ``POST`` API on loopback is crawled into products on both engines."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from forager.api.deps import Runtime
from forager.db.models import Item, Product
from forager.errors import InvalidRequest
from forager.parse.base import Extracted
from forager.parse.selectors import compile_map
from tests.support.crawling import crawl
from tests.support.site import TestSite

URL = "https://shop.test/api/product"
ANSWER = {
    "data": {
        "product": {
            "sku": "SKU-7",
            "title": "Test Product 7",
            "price": {"amount": 7.99, "currency": "EUR"},
            "stock": True,
            "images": ["/i/7a.jpg", "/i/7b.jpg"],
        },
        "related": [
            {"sku": "SKU-8", "title": "Eight", "price": {"amount": 8.5}},
            {"sku": "SKU-9", "title": "Nine", "price": {"amount": 9}},
        ],
    }
}
FIELDS: dict[str, Any] = {
    "product_name": {"json": "data.product.title"},
    "price": {"json": "data.product.price.amount"},
    "currency": {"json": "data.product.price.currency"},
    "is_available": {"json": "data.product.stock"},
    "sku": {"json": "data.product.sku"},
    "image_urls": {"json": "data.product.images", "all": True},
    "fallback": False,
    "items": [
        {
            "kind": "related",
            "each": {"json": "data.related"},
            "key": "sku",
            "fields": {
                "sku": {"json": "sku"},
                "name": {"json": "title"},
                "price": {"json": "price.amount", "post": ["number"]},
            },
        }
    ],
}


def test_a_selector_map_reads_a_json_answer_into_a_product_and_items() -> None:
    parsed = compile_map(FIELDS, 1).parse(json.dumps(ANSWER), URL)
    assert isinstance(parsed, Extracted) and parsed.product is not None
    product = parsed.product
    assert (product.product_name, product.price, product.currency) == (
        "Test Product 7",
        Decimal("7.99"),
        "EUR",
    )
    assert product.is_available is True and product.sku == "SKU-7"
    assert product.image_urls == ["https://shop.test/i/7a.jpg", "https://shop.test/i/7b.jpg"]
    assert [(i.kind, i.key, i.data) for i in parsed.items] == [
        ("related", "SKU-8", {"sku": "SKU-8", "name": "Eight", "price": "8.5"}),
        ("related", "SKU-9", {"sku": "SKU-9", "name": "Nine", "price": "9"}),
    ]


def test_json_rules_find_nothing_in_a_page_that_is_not_json() -> None:
    values, _ = compile_map({"product_name": {"json": "data.product.title"}}, 1).extract(
        "<html><h1>Not JSON</h1></html>", URL
    )
    assert values == {"product_name": None}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"product_name": {"json": "data..title"}}, "fields.product_name.json"),
        ({"product_name": {"json": "$.data.title"}}, "fields.product_name.json"),
        ({"product_name": {"json": "a", "css": "b"}}, "fields.product_name"),
        (
            {
                "items": [
                    {
                        "kind": "x",
                        "each": {"json": "data.related"},
                        "key": "sku",
                        "fields": {"sku": {"css": ".sku"}},
                    }
                ]
            },
            "fields.items.0.fields.sku",
        ),
    ],
)
def test_a_bad_json_rule_is_refused_naming_it(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        compile_map(fields, 1)
    assert refused.value.field == field


async def test_a_json_post_api_is_crawled_into_products(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    base = site.url("/").rstrip("/")
    body = {"domain_name": "127.0.0.1", "base_url": base, "parser_name": "selector"}
    response = await api.post("/api/domains", json=body)
    assert response.status_code == 201, response.text
    domain_id = response.json()["id"]
    api_fields = {k: v for k, v in FIELDS.items() if k not in ("currency", "image_urls")}
    api_fields["currency"] = {"json": "data.product.price.currency"}
    saved = await api.post(
        f"/api/domains/{domain_id}/selector-parsers", json={"fields": api_fields}
    )
    assert saved.status_code == 201, saved.text
    ids = []
    for n in (3, 4):
        request = {"method": "POST", "json_body": {"n": n}}
        created = await api.post(
            "/api/tasks", json={"url": site.url("/api/product"), "request": request}
        )
        assert created.status_code == 201, created.text
        ids.append(created.json()["task"]["id"])
    tasks = await crawl(runtime.db, runtime.settings, ids)
    assert [tasks[i].status for i in ids] == ["completed", "completed"]
    async with runtime.db.reader() as session:
        products = {
            p.crawl_task_id: (p.product_name, p.price, p.currency, p.sku)
            for p in await session.scalars(select(Product).where(Product.crawl_task_id.in_(ids)))
        }
        items = sorted(i.item_key for i in await session.scalars(select(Item)))
    assert products == {
        ids[0]: ("Test Product 3", Decimal("3.99"), "USD", "SKU-3"),
        ids[1]: ("Test Product 4", Decimal("4.99"), "USD", "SKU-4"),
    }
    assert items == ["SKU-4", "SKU-5", "SKU-6"]  # related items of 3 and 4, 5 seen twice
    assert [r.method for r in site.requests() if r.path == "/api/product"] == ["POST", "POST"]
