"""Selector parsers (issue 17) on both engines: rules refused with their name and reason,
versions, preview on a stored page in the parse processes, and a new version applied to stored
pages by restart-parsing without a refetch; fields without a rule from the generic parser and a
candidate compared with the parser in use on stored pages (issue 34)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from forager.api.deps import Runtime
from forager.errors import InvalidRequest
from forager.parse.base import ProductRecord
from forager.parse.generic import GenericParser
from forager.parse.selectors import compile_map
from forager.queue.admin import restart_parsing_bulk
from tests.support.crawling import crawl
from tests.support.pages import product_page
from tests.support.site import TestSite

# Version 1 reads the related product's price by mistake (the first .price after the title's
# box is right, ".related .price" is not): the kind of error an operator fixes in version 2.
V1: dict[str, Any] = {
    "product_name": {"css": "h1.product-title"},
    "price": {"css": ".related .price", "post": ["price"]},
    "sku": {"jsonld": "Product:sku"},
    "image_urls": {"css": ".gallery img", "attr": "src", "all": True},
}
V2: dict[str, Any] = {
    **V1,
    "price": {"xpath": "//div[@class='price-box']/span[@class='price']", "post": ["price"]},
    "brand": {"jsonld": "Product:brand.name"},
    "is_available": {"css": ".price-box .stock", "post": [{"regex": "(?i)in stock"}, "present"]},
    "category": {"css": "nav.breadcrumb a", "all": True, "post": [{"join": " > "}]},
}


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def _product(api: httpx.AsyncClient, url: str) -> dict[str, Any]:
    [product] = (await api.get("/api/products", params={"q": "Test Product 3"})).json()["items"]
    assert product["url"] == url
    return dict(product)


async def test_bad_rules_are_refused_naming_the_rule_and_why(api: httpx.AsyncClient) -> None:
    domain = (await api.post("/api/domains", json={"domain_name": "shop.test"})).json()
    path = f"/api/domains/{domain['id']}/selector-parsers"
    cases = [
        (
            {"product_name": {"css": "h1", "post": [{"regex": "(a)\\1"}]}},
            "fields.product_name.post.0.regex",
            "backreferences",
        ),
        ({"product_name": {"css": "h1["}}, "fields.product_name.css", "not a CSS selector"),
        ({"product_name": {"xpath": "//div["}}, "fields.product_name.xpath", "not an XPath"),
        (
            {"product_name": {"css": "h1"}, "price": {"css": ".p", "xpath": "//p"}},
            "fields.price",
            "exactly one of",
        ),
        (
            {"product_name": {"css": "h1"}, "colour": {"css": ".c"}},
            "fields.colour",
            "not a product field",
        ),
        ({"price": {"css": ".p"}}, "fields", "product_name needs a rule"),
        (
            {"product_name": {"css": "h1", "post": ["upper"]}},
            "fields.product_name.post.0",
            "not a step",
        ),
    ]
    for fields, field, reason in cases:
        response = await api.post(path, json={"fields": fields})
        assert response.status_code == 422, (fields, response.text)
        [error] = response.json()["errors"]
        assert error["field"] == field and reason in error["message"], (fields, error)
    listed = (await api.get(path)).json()
    assert (listed["total"], listed["in_use"]) == (0, None)  # nothing half-written


async def test_versions_preview_and_restart_parsing_without_refetch(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = _runtime(api)
    site.set_price(3, Decimal("19.99"))
    url = site.url("/product/3")
    task_id = (await api.post("/api/tasks", json={"url": url})).json()["task"]["id"]
    domain_id = (await api.get(f"/api/tasks/{task_id}")).json()["domain_id"]
    path = f"/api/domains/{domain_id}/selector-parsers"
    saved = await api.post(path, json={"fields": V1, "note": "first try"})
    assert saved.status_code == 201, saved.text
    assert (saved.json()["version"], saved.json()["in_use"]) == (1, True)
    assert (await api.get(f"/api/domains/{domain_id}")).json()["parser_name"] == "selector"

    await crawl(runtime.db, runtime.settings, [task_id], parts=runtime.parts)
    first = await _product(api, url)
    assert (first["price"], first["parser_name"], first["parser_version"]) == (
        "13.49",
        "selector",
        "1",
    )
    assert first["sku"] == "SKU-3"
    requests = len(site.log()["requests"])

    # The stored page is listed, and an unsaved map previews on it (values and field errors).
    [stored] = (await api.get(f"/api/domains/{domain_id}/stored-pages")).json()["items"]
    assert stored == {"task_id": task_id, "url": url, "fetched_at": stored["fetched_at"]}
    trial = {**V2, "description": {"css": "p", "all": True}}
    preview = await api.post(f"{path}/preview", json={"fields": trial, "task_id": task_id})
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert body["values"]["price"] == "19.99" and body["values"]["brand"] == "Brand 3"
    assert body["values"]["category"] == "Home > Category 3"
    assert body["values"]["is_available"] is True
    assert body["values"]["description"] is None
    assert "add a join step" in body["errors"]["description"]
    assert (await api.get(path)).json()["total"] == 1  # a preview saves nothing

    # Version 2, then restart-parsing of outdated products: the stored page, read again.
    saved = await api.post(path, json={"fields": V2})
    assert (saved.json()["version"], saved.json()["in_use"]) == (2, True)
    restarted = await api.post(
        "/api/tasks/restart-parsing", json={"domain_id": domain_id, "outdated": True}
    )
    assert restarted.json()["task_ids"] == [task_id], restarted.text
    await crawl(runtime.db, runtime.settings, [task_id], parts=runtime.parts)
    second = await _product(api, url)
    assert (second["price"], second["brand"], second["parser_version"]) == ("19.99", "Brand 3", "2")
    assert second["category"] == "Home > Category 3"
    assert len(site.log()["requests"]) == requests  # no refetch
    assert await restart_parsing_bulk(runtime.db, runtime.pages, outdated=True) == []

    # Versions, newest first; going back to version 1 is one call.
    listed = (await api.get(path)).json()
    assert [(v["version"], v["in_use"]) for v in listed["items"]] == [(2, True), (1, False)]
    assert listed["items"][1]["note"] == "first try"
    used = await api.post(f"{path}/1/use")
    assert used.status_code == 200 and used.json()["in_use"] is True
    assert (await api.get(f"{path}/2")).json()["in_use"] is False
    assert (await api.get(f"{path}/3")).status_code == 404


async def test_preview_needs_a_stored_page_of_that_domain(api: httpx.AsyncClient) -> None:
    domain = (await api.post("/api/domains", json={"domain_name": "other.test"})).json()
    path = f"/api/domains/{domain['id']}/selector-parsers/preview"
    missing = await api.post(path, json={"fields": V1, "task_id": 99})
    assert missing.status_code == 404 and "not a task of domain" in missing.json()["detail"]
    assert (
        await api.post("/api/domains/999999/selector-parsers", json={"fields": V1})
    ).status_code == 404


# Issue 34: rules for name, price, currency, sku and brand, nothing for availability.
FIVE: dict[str, Any] = {
    "product_name": {"css": "h1.product-title"},
    "price": {"css": ".price-box .price", "post": ["price"]},
    "currency": {"jsonld": "Product:offers.priceCurrency"},
    "sku": {"jsonld": "Product:sku"},
    "brand": {"jsonld": "Product:brand.name"},
}


def test_fields_without_a_rule_come_from_the_generic_parser_unless_fallback_is_false() -> None:
    url = "https://shop.test/product/5"
    html = product_page(5, Decimal("12.50"), False, "https://shop.test", kb=1)
    record = compile_map(FIVE, 1).parse(html, url)
    assert isinstance(record, ProductRecord)
    assert (record.product_name, record.price, record.sku) == (
        "Test Product 5",
        Decimal("12.50"),
        "SKU-5",
    )
    assert (record.availability, record.is_available) == ("OutOfStock", False)
    assert record.description == "Description of test product 5."
    assert record.review_count == 5 and len(record.image_urls) == 2
    # The map's own fields are the markup's; the fallback's keep the generic parser's trust.
    assert record.field_confidence["price"] == 0.95
    generic = GenericParser().parse(html, url).field_confidence
    assert record.field_confidence["availability"] == generic["availability"]
    assert (record.parser_name, record.parser_version) == ("selector", "1")

    strict = compile_map({**FIVE, "fallback": False}, 2).parse(html, url)
    assert isinstance(strict, ProductRecord)
    assert (strict.availability, strict.is_available, strict.description) == (None, None, None)
    assert "availability" not in strict.field_confidence and strict.image_urls == []
    with pytest.raises(InvalidRequest) as refused:
        compile_map({**FIVE, "fallback": "no"})
    assert refused.value.field == "fields.fallback"


@pytest.mark.parametrize(
    ("written", "kept", "available"),
    [
        ("https://schema.org/OutOfStock", "OutOfStock", False),
        ("http://schema.org/InStock", "InStock", True),
        ("schema:PreOrder", "PreOrder", True),
        ("Ships in 3 days", "Ships in 3 days", None),  # not schema.org's: kept as read
    ],
)
def test_an_availability_read_from_json_ld_is_kept_as_the_generic_parser_keeps_it(
    written: str, kept: str, available: bool | None
) -> None:
    url = "https://shop.test/product/5"
    html = product_page(5, Decimal("12.50"), False, "https://shop.test", kb=1)
    html = html.replace('"https://schema.org/OutOfStock"', json.dumps(written))
    assert written in html
    fields = {**FIVE, "availability": {"jsonld": "Product:offers.availability"}, "fallback": False}
    record = compile_map(fields, 1).parse(html, url)
    assert isinstance(record, ProductRecord)
    assert (record.availability, record.is_available) == (kept, available)
    # A rule of its own for is_available is the operator's word, even when it matched nothing.
    ruled = compile_map({**fields, "is_available": {"css": ".no-such-thing", "post": ["present"]}})
    assert ruled.parse(html, url).is_available is False  # type: ignore[union-attr]


async def test_a_map_without_an_availability_rule_keeps_it_on_recrawl(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = _runtime(api)
    url = site.url("/product/3")
    task_id = (await api.post("/api/tasks", json={"url": url})).json()["task"]["id"]
    await crawl(runtime.db, runtime.settings, [task_id], parts=runtime.parts)
    before = await _product(api, url)
    assert (before["parser_name"], before["availability"]) == ("generic", "InStock")
    domain_id = (await api.get(f"/api/tasks/{task_id}")).json()["domain_id"]
    path = f"/api/domains/{domain_id}/selector-parsers"

    async def reparse(fields: dict[str, Any]) -> dict[str, Any]:
        assert (await api.post(path, json={"fields": fields})).status_code == 201
        restarted = await api.post(
            "/api/tasks/restart-parsing", json={"domain_id": domain_id, "outdated": True}
        )
        assert restarted.json()["task_ids"] == [task_id], restarted.text
        await crawl(runtime.db, runtime.settings, [task_id], parts=runtime.parts)
        return await _product(api, url)

    kept = await reparse(FIVE)
    assert (kept["parser_name"], kept["sku"], kept["brand"]) == ("selector", "SKU-3", "Brand 3")
    assert (kept["availability"], kept["is_available"]) == ("InStock", True)
    emptied = await reparse({**FIVE, "fallback": False})  # the operator's choice
    assert (emptied["parser_version"], emptied["availability"]) == ("2", None)


def _summary(body: dict[str, Any]) -> dict[str, tuple[int, int, int, int]]:
    return {f["field"]: (f["added"], f["changed"], f["lost"], f["same"]) for f in body["fields"]}


async def test_compare_shows_what_a_candidate_adds_changes_and_loses_on_stored_pages(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = _runtime(api)
    site.set_price(4, Decimal("7.25"), available=False)
    urls = [site.url("/product/3"), site.url("/product/4")]
    ids = [(await api.post("/api/tasks", json={"url": u})).json()["task"]["id"] for u in urls]
    await crawl(runtime.db, runtime.settings, ids, parts=runtime.parts)
    domain_id = (await api.get(f"/api/tasks/{ids[0]}")).json()["domain_id"]
    path = f"/api/domains/{domain_id}/selector-parsers"
    wrong = {**FIVE, "price": V1["price"], "fallback": False}  # the related product's price

    compared = await api.post(f"{path}/compare", json={"fields": wrong})
    assert compared.status_code == 200, compared.text
    body = compared.json()
    assert (body["current_parser"], body["current_version"]) == ("generic", None)
    summary = _summary(body)
    assert summary["price"] == (0, 2, 0, 0) and summary["sku"] == (0, 0, 0, 2)
    assert summary["availability"] == (0, 0, 2, 0) and summary["description"] == (0, 0, 2, 0)
    assert {"availability", "is_available", "image_urls"} <= set(body["lost"])
    assert "sku" not in body["lost"]
    assert sorted(p["task_id"] for p in body["pages"]) == sorted(ids)
    page4 = next(p for p in body["pages"] if p["url"] == urls[1])
    diffs = {d["field"]: d for d in page4["fields"]}
    assert diffs["availability"] == {
        "field": "availability",
        "current": "OutOfStock",
        "candidate": None,
        "verdict": "lost",
    }
    assert (diffs["price"]["current"], diffs["price"]["verdict"]) == ("7.25", "changed")
    assert page4["current_error"] is None and page4["candidate_error"] is None

    # With the fallback (the default) nothing is lost; only the price the rules read changes.
    fallback = (
        await api.post(f"{path}/compare", json={"fields": {**wrong, "fallback": True}})
    ).json()
    assert fallback["lost"] == [] and _summary(fallback)["availability"] == (0, 0, 0, 2)
    assert {k for k, v in _summary(fallback).items() if v[3] != 2} == {"price"}

    # Against a saved map in use, on the newest page only; nothing is saved by comparing.
    assert (await api.post(path, json={"fields": FIVE})).status_code == 201
    one = (await api.post(f"{path}/compare", json={"fields": wrong, "pages": 1})).json()
    assert (one["current_parser"], one["current_version"], len(one["pages"])) == ("selector", 1, 1)
    assert _summary(one)["price"] == (0, 1, 0, 0)
    assert (await api.get(path)).json()["total"] == 1
    bad = await api.post(f"{path}/compare", json={"fields": {"product_name": {"css": "h1["}}})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "fields.product_name.css"
    missing = await api.post("/api/domains/999999/selector-parsers/compare", json={"fields": FIVE})
    assert missing.status_code == 404
