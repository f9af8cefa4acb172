"""Product filters, full-text search and streaming exports over the API, on both engines."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, select, text, update

from forager.db.engine import Database
from forager.db.models import Product, ProductImage
from forager.db.types import utcnow
from forager.parse.base import ProductRecord
from forager.products import export, search
from forager.products.export import CSV_FIELDS
from forager.products.persist import save_product
from forager.products.records import product_record
from forager.products.search import ProductFilters, fts5_query
from tests.support.products import runtime_of as _runtime
from tests.support.products import save as _save

PROBLEM = "application/problem+json"


async def _resave(api: httpx.AsyncClient, product_id: int, **fields: Any) -> None:
    runtime = _runtime(api)
    async with runtime.db.session() as session:
        product = await session.get_one(Product, product_id)
        record = ProductRecord(url=product.url, parser_name="generic", parser_version="1", **fields)
        await save_product(
            session,
            domain_id=product.domain_id,
            task_id=product.crawl_task_id or 0,
            url=product.url,
            url_hash=product.url_hash,
            record=record,
        )


CATALOG: dict[str, dict[str, Any]] = {
    "kettle": {
        "url": "https://shop-a.test/p/kettle",
        "product_name": "Steel Kettle",
        "brand": "Hearth",
        "description": "A kettle that boils water fast. The best kettle for tea.",
        "category": "Kitchen > Appliances",
        "price": Decimal("39.90"),
        "currency": "USD",
        "availability": "In stock",
        "is_available": True,
        "image_urls": ["https://shop-a.test/img/kettle-1.jpg", "https://shop-a.test/img/k-2.jpg"],
        "sku": "1002/710",
        "gtin": "4006381333931",
        "mpn": "HK-17",
    },
    "teapot": {
        "url": "https://shop-a.test/p/teapot",
        "product_name": "Ceramic Teapot",
        "brand": "Hearth",
        "description": "Pairs well with any kettle.",
        "category": "Kitchen > Tableware",
        "price": Decimal("24.50"),
        "currency": "USD",
        "availability": "Out of stock",
        "is_available": False,
    },
    "drill": {
        "url": "https://shop-b.test/p/drill",
        "product_name": 'Cordless Drill 18V, "Pro"',
        "brand": "Bosch",
        "description": "Drill, driver; two batteries.\nSecond line, with a comma.",
        "category": "Tools",
        "price": Decimal("129.00"),
        "currency": "EUR",
        "availability": "In stock",
        "is_available": True,
        "sku": "466/7999",
        "gtin": "036000291452",
    },
    "cafe": {
        "url": "https://shop-b.test/p/cafe",
        "product_name": "Café moído 500g",
        "brand": None,
        "description": None,
        "category": None,
        "price": None,
        "currency": None,
    },
}


@pytest.fixture
async def catalog(api: httpx.AsyncClient) -> dict[str, int]:
    ids = {}
    for key, fields in CATALOG.items():
        ids[key] = await _save(
            api, fields["url"], **{k: v for k, v in fields.items() if k != "url"}
        )
    return ids


async def _names(api: httpx.AsyncClient, **params: Any) -> list[str]:
    response = await api.get("/api/products", params=params)
    assert response.status_code == 200, response.text
    page = response.json()
    assert page["total"] == len(page["items"])
    return [p["product_name"] for p in page["items"]]


def _problem_fields(response: httpx.Response) -> list[str]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    return [e["field"] for e in response.json()["errors"]]


# --------------------------------------------------------------------------- filters


async def test_filters(api: httpx.AsyncClient, catalog: dict[str, int]) -> None:
    kettle, teapot, drill, cafe = (CATALOG[k]["product_name"] for k in CATALOG)
    assert set(await _names(api)) == {kettle, teapot, drill, cafe}
    assert set(await _names(api, min_price="25")) == {kettle, drill}
    assert set(await _names(api, max_price="39.90")) == {kettle, teapot}
    assert await _names(api, min_price="24.50", max_price="24.50") == [teapot]
    assert set(await _names(api, currency="usd")) == {kettle, teapot}
    assert set(await _names(api, is_available="true")) == {kettle, drill}
    assert await _names(api, is_available="false") == [teapot]
    assert set(await _names(api, availability="In stock")) == {kettle, drill}
    assert await _names(api, availability="in stock") == []  # exact text
    assert set(await _names(api, brand="hearth")) == {kettle, teapot}
    assert set(await _names(api, category="KITCHEN")) == {kettle, teapot}
    assert await _names(api, category="tableware") == [teapot]
    assert await _names(api, category="%") == []  # wildcards are literal
    assert set(await _names(api, domain="shop-b.test")) == {drill, cafe}
    assert await _names(api, domain="nowhere.test") == []
    assert await _names(api, brand="hearth", max_price="30", is_available="false") == [teapot]


async def test_find_a_product_by_its_sku_or_gtin(
    api: httpx.AsyncClient, catalog: dict[str, int]
) -> None:
    kettle, drill = CATALOG["kettle"]["product_name"], CATALOG["drill"]["product_name"]
    assert await _names(api, sku="1002/710") == [kettle]
    assert await _names(api, sku="466/7999") == [drill]
    assert await _names(api, sku="1002") == []  # exact, not a part of it
    assert await _names(api, gtin="4006381333931") == [kettle]
    assert await _names(api, gtin="0 36000 29145-2") == [drill]  # as printed on the pack
    assert await _names(api, gtin="036000291452", sku="1002/710") == []
    assert _problem_fields(await api.get("/api/products", params={"gtin": "EAN123"})) == ["gtin"]
    body = (await api.get(f"/api/products/{catalog['kettle']}")).json()
    assert (body["sku"], body["gtin"], body["mpn"]) == ("1002/710", "4006381333931", "HK-17")


async def test_changed_since_and_order(api: httpx.AsyncClient, catalog: dict[str, int]) -> None:
    runtime = _runtime(api)
    old = utcnow() - timedelta(days=10)
    async with runtime.db.session() as session:
        await session.execute(update(Product).values(updated_at=old))
        await session.execute(
            update(Product)
            .where(Product.id == catalog["drill"])
            .values(updated_at=old + timedelta(days=5))
        )
    since = (old + timedelta(days=1)).isoformat()
    assert await _names(api, changed_since=since) == [CATALOG["drill"]["product_name"]]
    assert len(await _names(api, changed_since=old.isoformat())) == 4
    # Newest update first without a search.
    assert (await _names(api))[0] == CATALOG["drill"]["product_name"]


async def test_invalid_filters_are_422_naming_the_field(
    api: httpx.AsyncClient, catalog: dict[str, int]
) -> None:
    get = api.get
    # An empty price range is a question with no answer, not an error (and the description can
    # say nothing about two parameters together): it matches nothing.
    empty = await get("/api/products", params={"min_price": 5, "max_price": 4})
    assert (empty.status_code, empty.json()["total"]) == (200, 0)
    assert (await get("/api/products", params={"min_price": "0.5"})).status_code == 200
    for when in ("0.5", "1700000000"):  # numbers are not date-times
        stamp = await get("/api/products", params={"changed_since": when})
        assert _problem_fields(stamp) == ["changed_since"]
    assert _problem_fields(await get("/api/products", params={"min_price": "cheap"})) == [
        "min_price"
    ]
    assert _problem_fields(await get("/api/products", params={"max_price": "-1"})) == ["max_price"]
    assert _problem_fields(await get("/api/products", params={"max_price": "1e40"})) == [
        "max_price"
    ]
    assert _problem_fields(await get("/api/products", params={"min_price": "NaN"})) == ["min_price"]
    assert _problem_fields(await get("/api/products", params={"currency": "dollars"})) == [
        "currency"
    ]
    assert _problem_fields(await get("/api/products", params={"is_available": "maybe"})) == [
        "is_available"
    ]
    naive = {"changed_since": "2026-01-01T00:00:00"}
    assert _problem_fields(await get("/api/products", params=naive)) == ["changed_since"]
    assert _problem_fields(await get("/api/products/export.csv", params=naive)) == ["changed_since"]
    jsonl = await get("/api/products/export.jsonl", params={"min_price": 5, "max_price": 4})
    assert (jsonl.status_code, jsonl.text) == (200, "")


# --------------------------------------------------------------------------- search


async def test_search_ranks_by_relevance(api: httpx.AsyncClient, catalog: dict[str, int]) -> None:
    # The kettle has the term in its name and (twice) its description; the teapot only once in
    # its description.
    response = (await api.get("/api/products", params={"q": "kettle"})).json()
    assert [p["product_name"] for p in response["items"]] == ["Steel Kettle", "Ceramic Teapot"]
    assert response["total"] == 2
    assert await _names(api, q="KETTLE", is_available="false") == ["Ceramic Teapot"]
    assert await _names(api, q="hearth teapot") == ["Ceramic Teapot"]  # brand and name
    assert await _names(api, q="batteries") == [CATALOG["drill"]["product_name"]]
    assert await _names(api, q="pottery") == []
    paged = (await api.get("/api/products", params={"q": "kettle", "limit": 1, "offset": 1})).json()
    assert ([p["product_name"] for p in paged["items"]], paged["total"]) == (["Ceramic Teapot"], 2)


async def test_search_finds_a_product_by_its_sku_or_asin(
    api: httpx.AsyncClient, catalog: dict[str, int]
) -> None:
    await _resave(api, catalog["drill"], product_name="Cordless Drill", sku="GSR-18V-55")
    await _resave(api, catalog["kettle"], product_name="Steel Kettle", asin="B0KETTLE01")
    assert await _names(api, q="GSR-18V-55") == ["Cordless Drill"]
    assert await _names(api, q=" B0KETTLE01 ") == ["Steel Kettle"]
    # The other filters still apply; a code nobody has is a word search (nothing here).
    assert await _names(api, q="GSR-18V-55", currency="USD") == []
    assert await _names(api, q="GSR-18V-56") == []


async def test_products_sort_by_price_name_or_update(
    api: httpx.AsyncClient, catalog: dict[str, int]
) -> None:
    async def order(**params: Any) -> list[str]:
        response = await api.get("/api/products", params=params)
        assert response.status_code == 200, response.text
        return [p["product_name"] for p in response.json()["items"]]

    cafe = CATALOG["cafe"]["product_name"]
    drill = CATALOG["drill"]["product_name"]
    # Prices missing come last, whichever way.
    assert await order(sort="price") == ["Ceramic Teapot", "Steel Kettle", drill, cafe]
    assert await order(sort="-price") == [drill, "Steel Kettle", "Ceramic Teapot", cafe]
    assert await order(sort="name") == ["Café moído 500g", "Ceramic Teapot", drill, "Steel Kettle"]
    assert await order(sort="-price", q="kettle") == ["Steel Kettle", "Ceramic Teapot"]
    assert await order(sort="price", limit=1, offset=1) == ["Steel Kettle"]
    page = (await api.get("/api/products", params={"sort": "price", "q": "kettle"})).json()
    assert page["total"] == 2
    assert (await api.get("/api/products", params={"sort": "brand"})).status_code == 422


async def test_a_broad_search_ranks_its_newest_matches_and_lists_the_rest(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ranking is per match: past RANKED_MATCHES text matches, only the newest are ranked and
    # the older ones follow newest first — every match still listed once.
    monkeypatch.setattr(search, "RANKED_MATCHES", 4)
    # How often "lamp" appears sets the relevance: the newest product is the best match.
    ids = [
        await _save(
            api,
            f"https://shop-c.test/p/{n}",
            product_name=" ".join(["lamp"] * times),
            price=Decimal(10 if n % 2 == 0 else 100),
        )
        for n, times in enumerate([3, 1, 2, 1, 1, 2, 3])
    ]
    await _save(api, "https://shop-c.test/p/chair", product_name="chair")
    # The newest four (ids[3:]) ranked: 3×, 2×, then the two 1× newest first; then the rest.
    expected = [ids[6], ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]]
    for limit in (1, 2, 3, 7, 50):
        seen = []
        for offset in range(0, 8, limit):
            page = (
                await api.get(
                    "/api/products", params={"q": "lamp", "limit": limit, "offset": offset}
                )
            ).json()
            # Counted up to RANKED_MATCHES: past it the total is a lower bound.
            assert (page["total"], page["total_exact"]) == (4, False)
            seen += [p["id"] for p in page["items"]]
        assert seen == expected, limit
    # A filter narrows both parts: the cheap ones among the ranked, then the older cheap ones.
    cheap = []
    for offset in range(5):
        page = (
            await api.get(
                "/api/products",
                params={"q": "lamp", "max_price": "50", "limit": 1, "offset": offset},
            )
        ).json()
        assert (page["total"], page["total_exact"]) == (4, True)
        cheap += [p["id"] for p in page["items"]]
    assert cheap == [ids[6], ids[4], ids[2], ids[0]]
    monkeypatch.setattr(search, "RANKED_MATCHES", 100)  # every match ranked: best first
    whole = (await api.get("/api/products", params={"q": "lamp"})).json()
    assert (whole["total"], whole["total_exact"]) == (7, True)
    assert [p["id"] for p in whole["items"]] == [
        ids[6],
        ids[0],
        ids[5],
        ids[2],
        ids[4],
        ids[3],
        ids[1],
    ]


@pytest.mark.parametrize(
    "q",
    [
        '"',
        '""',
        "*",
        "kettle*",
        "AND",
        "kettle AND",
        "OR NOT",
        "(",
        "kettle)",
        "-",
        "-kettle",
        "NEAR(kettle tea)",
        "product_name:kettle",
        "^kettle",
        "'",
        "\\",
        "%_",
        "café",
        "moído",
        "日本語",
        "😀",
        " ",
        "a" * 500,
        "'; DROP TABLE products; --",
    ],
)
async def test_search_never_fails_on_odd_input(
    api: httpx.AsyncClient, catalog: dict[str, int], q: str
) -> None:
    response = await api.get("/api/products", params={"q": q})
    assert response.status_code == 200, response.text
    for path in ("/api/products/export.csv", "/api/products/export.jsonl"):
        assert (await api.get(path, params={"q": q})).status_code == 200


async def test_search_unicode_and_operators_as_words(
    api: httpx.AsyncClient, catalog: dict[str, int]
) -> None:
    assert await _names(api, q="moído") == ["Café moído 500g"]
    assert await _names(api, q="café 500g") == ["Café moído 500g"]
    assert await _names(api, q='"kettle') == ["Steel Kettle", "Ceramic Teapot"]
    assert await _names(api, q="18V pro") == [CATALOG["drill"]["product_name"]]
    assert await _names(api, q="*") == []


def test_fts5_query_quotes_every_word() -> None:
    assert fts5_query('kettle AND "tea" (x*') == '"kettle" "AND" "tea" "x"'
    assert fts5_query(" -*()\"' ") is None


async def test_search_follows_updates_and_deletes(
    api: httpx.AsyncClient, catalog: dict[str, int]
) -> None:
    kettle = catalog["kettle"]
    await _resave(api, kettle, product_name="Copper Samovar", description="Boils water.")
    assert await _names(api, q="samovar") == ["Copper Samovar"]
    assert await _names(api, q="kettle") == ["Ceramic Teapot"]
    assert await _names(api, q="steel") == []

    async with _runtime(api).db.session() as session:
        await session.execute(delete(Product).where(Product.id == catalog["teapot"]))
    assert await _names(api, q="kettle") == []
    assert await _names(api, q="hearth") == []
    assert await _names(api, q="samovar") == ["Copper Samovar"]
    assert len(await _names(api)) == 3


# The FTS5 table exists on SQLite only.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_sqlite_fts_index_stays_consistent(
    api: httpx.AsyncClient, catalog: dict[str, int]
) -> None:
    db: Database = _runtime(api).db
    await _resave(api, catalog["drill"], product_name="Impact Driver", brand="Makita")
    async with db.session() as session:
        await session.execute(delete(Product).where(Product.id == catalog["cafe"]))
        # An update that does not touch the indexed columns leaves the index alone.
        await session.execute(update(Product).values(last_crawled_at=utcnow()))
        result = await session.execute(
            text("INSERT INTO products_fts (products_fts, rank) VALUES ('integrity-check', 1)")
        )
        assert result is not None  # raises on a mismatch between index and content
        rows = (await session.execute(text("SELECT count(*) FROM products_fts"))).scalar()
    assert rows == 3


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_postgresql_search_uses_the_gin_index(
    api: httpx.AsyncClient, catalog: dict[str, int]
) -> None:
    db: Database = _runtime(api).db
    from forager.products.search import list_query

    query, _ = list_query("postgresql", ProductFilters(q="kettle"))
    compiled = query.compile(db.engine.sync_engine, compile_kwargs={"literal_binds": True})
    async with db.reader() as session:
        await session.execute(text("SET LOCAL enable_seqscan = off"))
        plan = (await session.execute(text(f"EXPLAIN {compiled}"))).scalars().all()
    assert any("ix_products_search" in line for line in plan), plan


# --------------------------------------------------------------------------- exports


async def _expected_records(api: httpx.AsyncClient, ids: list[int]) -> list[dict[str, Any]]:
    async with _runtime(api).db.reader() as session:
        products = (
            await session.scalars(select(Product).where(Product.id.in_(ids)).order_by(Product.id))
        ).all()
        images = {
            p.id: list(
                (
                    await session.scalars(
                        select(ProductImage.image_url)
                        .where(ProductImage.product_id == p.id)
                        .order_by(ProductImage.position)
                    )
                ).all()
            )
            for p in products
        }
    return [product_record(p, images[p.id]) for p in products]


async def test_jsonl_export(api: httpx.AsyncClient, catalog: dict[str, int]) -> None:
    response = await api.get("/api/products/export.jsonl")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    assert response.headers["content-disposition"] == 'attachment; filename="products.jsonl"'
    assert response.text.endswith("\n")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert lines == await _expected_records(api, sorted(catalog.values()))
    kettle = next(line for line in lines if line["product_name"] == "Steel Kettle")
    assert (kettle["price"], kettle["is_available"]) == ("39.90", True)
    assert kettle["image_urls"] == CATALOG["kettle"]["image_urls"]

    filtered = await api.get(
        "/api/products/export.jsonl", params={"q": "kettle", "currency": "USD"}
    )
    names = [json.loads(line)["product_name"] for line in filtered.text.splitlines()]
    assert sorted(names) == ["Ceramic Teapot", "Steel Kettle"]
    empty = await api.get("/api/products/export.jsonl", params={"min_price": "1000"})
    assert (empty.status_code, empty.text) == (200, "")


async def test_csv_export(api: httpx.AsyncClient, catalog: dict[str, int]) -> None:
    response = await api.get("/api/products/export.csv", params={"brand": "o"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert response.headers["content-disposition"] == 'attachment; filename="products.csv"'
    rows = list(csv.reader(io.StringIO(response.text, newline="")))
    assert tuple(rows[0]) == CSV_FIELDS
    body = [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert [r["product_name"] for r in body] == [CATALOG["drill"]["product_name"]]  # Bosch
    [drill] = body
    assert drill["description"] == CATALOG["drill"]["description"]  # commas, newline, quotes
    assert (drill["price"], drill["currency"], drill["is_available"]) == ("129.00", "EUR", "true")
    assert (drill["rating"], drill["image_urls"]) == ("", "")

    everything = await api.get("/api/products/export.csv")
    rows = list(csv.DictReader(io.StringIO(everything.text, newline="")))
    expected = await _expected_records(api, sorted(catalog.values()))
    assert [r["url"] for r in rows] == [e["url"] for e in expected]
    kettle = next(r for r in rows if r["product_name"] == "Steel Kettle")
    assert kettle["image_urls"].split(" ") == CATALOG["kettle"]["image_urls"]
    header_only = await api.get("/api/products/export.csv", params={"q": "nothing-matches"})
    assert header_only.text == ",".join(CSV_FIELDS) + "\r\n"


async def test_export_pages_by_id(api: httpx.AsyncClient, catalog: dict[str, int]) -> None:
    """Small chunks: every product once, in id order, one query per chunk."""
    db = _runtime(api).db
    chunks = [c async for c in export.records(db, ProductFilters(), chunk_rows=3)]
    assert [len(c) for c in chunks] == [3, 1]
    assert [r["url"] for c in chunks for r in c] == [
        e["url"] for e in await _expected_records(api, sorted(catalog.values()))
    ]
    exact = [c async for c in export.records(db, ProductFilters(), chunk_rows=2)]
    assert [len(c) for c in exact] == [2, 2]
    searched = [c async for c in export.records(db, ProductFilters(q="kettle"), chunk_rows=1)]
    assert [len(c) for c in searched] == [1, 1]
    body = b"".join([b async for b in export.stream(db, ProductFilters(), "jsonl", chunk_rows=1)])
    assert len(body.splitlines()) == 4


async def test_export_routes_are_not_product_ids(api: httpx.AsyncClient) -> None:
    assert (await api.get("/api/products/export.csv")).status_code == 200
    assert (await api.get("/api/products/export.jsonl")).text == ""
    assert (await api.get("/api/products/export.xml")).status_code == 404  # no such path
