"""Selector parsers (issue 17) on both engines: rules refused with their name and reason,
versions, preview on a stored page in the parse processes, and a new version applied to stored
pages by restart-parsing without a refetch."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx

from forager.api.deps import Runtime
from forager.queue.admin import restart_parsing_bulk
from tests.support.crawling import crawl
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
