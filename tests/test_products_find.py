"""Products found the way people look for them (issue 35): by SKU, ASIN, GTIN and minimum
rating; sorted by price, rating and last change; the same in both exports, on both engines."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from forager.db.models import Product
from forager.db.types import utcnow
from forager.products import export
from forager.products.search import ProductFilters
from tests.support.products import runtime_of, save

# name → (sku, asin, gtin, price, rating, days since its content last changed)
SHELF: dict[str, tuple[str | None, str | None, str | None, str | None, str | None, int]] = {
    "Kettle": ("K-1", None, "4006381333931", "39.90", "4.5", 3),
    "Teapot": ("T-2", "B00TEAPOT1", None, "24.50", "3.9", 1),
    "Drill": (None, "B00DRILL01", "036000291452", "129.00", None, 5),
    "Mug": ("M-4", None, None, None, "4.5", 2),
    "Grinder": ("G-5", "B00GRIND01", None, "24.50", "4.8", 4),
}


@pytest.fixture
async def shelf(api: httpx.AsyncClient) -> dict[str, int]:
    ids = {}
    for name, (sku, asin, gtin, price, rating, _) in SHELF.items():
        ids[name] = await save(
            api,
            f"https://shop.test/p/{name.lower()}",
            product_name=name,
            sku=sku,
            asin=asin,
            gtin=gtin,
            price=None if price is None else Decimal(price),
            currency="USD",
            rating=None if rating is None else Decimal(rating),
        )
    now = utcnow()
    async with runtime_of(api).db.session() as session:
        for name, product_id in ids.items():
            await session.execute(
                update(Product)
                .where(Product.id == product_id)
                .values(updated_at=now - timedelta(days=SHELF[name][5]))
            )
    return ids


async def _names(api: httpx.AsyncClient, **params: Any) -> list[str]:
    response = await api.get("/api/products", params=params)
    assert response.status_code == 200, response.text
    return [p["product_name"] for p in response.json()["items"]]


async def test_filters_by_identifier_and_rating(
    api: httpx.AsyncClient, shelf: dict[str, int]
) -> None:
    assert await _names(api, sku="T-2") == ["Teapot"]
    assert await _names(api, asin="b00drill01") == ["Drill"]  # any case
    assert await _names(api, gtin="4006381333931") == ["Kettle"]
    assert await _names(api, asin="B00DRILL01", sku="K-1") == []  # all must match
    assert await _names(api, min_rating="4.5", sort="name") == ["Grinder", "Kettle", "Mug"]
    assert await _names(api, min_rating="4.6") == ["Grinder"]
    assert await _names(api, min_rating="5") == []
    for bad in ({"asin": "B00"}, {"min_rating": "lots"}):
        response = await api.get("/api/products", params=bad)
        assert response.status_code == 422, response.text
        assert [e["field"] for e in response.json()["errors"]] == list(bad)


async def test_sorts(api: httpx.AsyncClient, shelf: dict[str, int]) -> None:
    # Ties broken by id (Teapot was saved before Grinder); no price / rating comes last.
    assert await _names(api, sort="price") == ["Teapot", "Grinder", "Kettle", "Drill", "Mug"]
    assert await _names(api, sort="-price") == ["Drill", "Kettle", "Grinder", "Teapot", "Mug"]
    assert await _names(api, sort="rating") == ["Teapot", "Kettle", "Mug", "Grinder", "Drill"]
    assert await _names(api, sort="-rating") == ["Grinder", "Mug", "Kettle", "Teapot", "Drill"]
    assert await _names(api, sort="-changed") == ["Teapot", "Mug", "Kettle", "Grinder", "Drill"]
    assert await _names(api, sort="changed") == ["Drill", "Grinder", "Kettle", "Mug", "Teapot"]
    assert await _names(api, sort="-rating", max_price="30") == ["Grinder", "Teapot"]


async def test_exports_filter_and_sort_like_the_list(
    api: httpx.AsyncClient, shelf: dict[str, int]
) -> None:
    for sort in ("price", "-price", "rating", "-rating", "-changed", None):
        await _export_matches_the_list(api, sort)


async def _export_matches_the_list(api: httpx.AsyncClient, sort: str | None) -> None:
    params: dict[str, Any] = {} if sort is None else {"sort": sort}
    listed = await _names(api, **params) if sort else await _ids_order(api)
    jsonl = await api.get("/api/products/export.jsonl", params=params)
    assert jsonl.status_code == 200, jsonl.text
    rows = [json.loads(line) for line in jsonl.text.splitlines()]
    assert [r["product_name"] for r in rows] == listed, sort
    csv_body = await api.get("/api/products/export.csv", params={**params, "min_rating": "4"})
    names = [r["product_name"] for r in csv.DictReader(io.StringIO(csv_body.text))]
    assert names == [n for n in listed if (SHELF[n][4] or "0") >= "4"], sort
    asin = await api.get("/api/products/export.jsonl", params={"asin": "B00GRIND01", **params})
    assert [json.loads(line)["product_name"] for line in asin.text.splitlines()] == ["Grinder"]
    # Keyset pages of two rows: every boundary (ties, the rows without a value) is crossed.
    paged = export.records(runtime_of(api).db, ProductFilters(), 2, sort)
    assert [r["product_name"] async for chunk in paged for r in chunk] == listed, sort


async def _ids_order(api: httpx.AsyncClient) -> list[str]:
    items = (await api.get("/api/products", params={"limit": 100})).json()["items"]
    return [p["product_name"] for p in sorted(items, key=lambda p: p["id"])]
