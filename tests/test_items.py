"""Items (issue 17): records that are not products, on both engines — the parser contract,
selector-map item extractors on the test site's listing page, versions (unchanged → same
version, changed → a new one), the API's filters, search and exports, restart-parsing of
stored pages with a new map version, and a parser registered by code in the parse processes."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from selectolax.lexbor import LexborHTMLParser
from sqlalchemy import event, func, select

from forager.api.deps import Runtime
from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlTask, Item, ItemVersion
from forager.db.types import utcnow
from forager.items.persist import ItemBatch, ItemInput, save_items
from forager.parse import registry
from forager.parse.base import Extracted, ItemRecord, ProductRecord
from forager.parse.items import BadItem, check_item, result_json, split
from forager.queue.admin import restart_parsing_bulk
from forager.queue.submit import SubmitSpec, submit_urls
from forager.runtime import open_database
from tests.conftest import SettingsFactory
from tests.support.crawling import crawl
from tests.support.site import TestSite

# Version 1 reads each ad's link, title, price and whether it is sold; version 2 adds the seller.
V1: dict[str, Any] = {
    "items": [
        {
            "kind": "ad",
            "each": {"css": "article.ad"},
            "key": "url",
            "fields": {
                "url": {"css": "a.more", "attr": "href"},
                "title": {"css": "h2"},
                "price": {"css": ".price", "post": ["price"]},
                "sold": {"css": ".sold", "post": ["present"]},
            },
        }
    ]
}
V2: dict[str, Any] = {
    "items": [
        {**V1["items"][0], "fields": {**V1["items"][0]["fields"], "seller": {"css": ".seller"}}}
    ]
}


class ListingParser:
    """A parser registered by code that gives items only: one ``ad`` per article."""

    name = "test-listing"
    version = "7"

    def parse(self, html: str, url: str) -> Extracted:
        tree = LexborHTMLParser(html)
        items = [
            ItemRecord(
                "ad",
                node.attributes.get("data-id") or "",
                {"title": node.css_first("h2").text(), "price": Decimal("1.50")},
            )
            for node in tree.css("article.ad")
        ]
        return Extracted(items=items)


# Registered on import: here, and in each parse process (``parser_modules``).
registry.register(ListingParser())


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


def _batch(*items: tuple[str, str, dict[str, Any]], url: str = "https://shop.test/ads") -> Any:
    checked = tuple(check_item(ItemRecord(*i), n) for n, i in enumerate(items))
    return ItemBatch(checked, url, "test", "1")


# -- the contract ------------------------------------------------------------------------------


def test_a_parser_result_splits_into_product_and_checked_items() -> None:
    product = ProductRecord(url="https://shop.test/p", product_name="P")
    assert split(product) == (product, [])
    assert result_json(product) == product.to_json()

    found, items = split(
        Extracted(
            product,
            [
                ItemRecord("ad", " a1 ", {"b": Decimal("2.50"), "a": [1, "x"]}),
                ItemRecord("ad", "a1", {"other": True}),  # same key on one page: the first stays
                ItemRecord("listing", "a1", {}),
            ],
        )
    )
    assert found is product
    assert [(i.kind, i.key, i.data) for i in items] == [
        ("ad", "a1", {"a": [1, "x"], "b": "2.50"}),
        ("listing", "a1", {}),
    ]
    # The same data in another key order is the same content.
    again = check_item(ItemRecord("ad", "a1", {"a": [1, "x"], "b": "2.50"}), 0)
    assert again.content_hash == items[0].content_hash
    shown = result_json(Extracted(None, [ItemRecord("ad", "k", {"x": 1})]))
    assert shown == {"product": None, "items": [{"kind": "ad", "key": "k", "data": {"x": 1}}]}


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (ItemRecord("Ad", "k", {}), "kind"),
        (ItemRecord("ad", "  ", {}), "key"),
        (ItemRecord("ad", "k" * 501, {}), "key"),
        (ItemRecord("ad", "k", {"when": {1, 2}}), "not JSON"),
        (ItemRecord("ad", "k", {"n": float("nan")}), "not JSON compliant"),
        (ItemRecord("ad", "k", ["not", "an", "object"]), "JSON object"),  # type: ignore[arg-type]
        ({"kind": "ad"}, "not an ItemRecord"),
    ],
)
def test_items_that_break_the_contract_are_refused_naming_them(item: Any, reason: str) -> None:
    with pytest.raises(BadItem, match=reason) as caught:
        split(Extracted(items=[item]))
    assert caught.value.message.startswith("items[0]")


def test_a_result_that_is_neither_is_a_parser_bug() -> None:
    with pytest.raises(BadItem, match="not a ProductRecord or Extracted"):
        split({"product_name": "x"})


# -- storage -------------------------------------------------------------------------------------


async def _domain_task(db: Database, settings: Settings, url: str) -> tuple[int, int]:
    [outcome] = await submit_urls(db, settings, [SubmitSpec(url=url)])
    assert outcome.task_id is not None
    async with db.reader() as session:
        task = await session.get_one(CrawlTask, outcome.task_id)
        return task.domain_id, task.id


async def _save(db: Database, *pages: ItemInput) -> list[tuple[int, str]]:
    async with db.session() as session:
        return list(await save_items(session, list(pages)))


async def _versions(db: Database, item_id: int) -> list[tuple[int, dict[str, Any]]]:
    async with db.reader() as session:
        rows = await session.execute(
            select(ItemVersion.version, ItemVersion.data)
            .where(ItemVersion.item_id == item_id)
            .order_by(ItemVersion.version)
        )
        return [(v, d) for v, d in rows]


async def test_versions_only_when_the_canonical_json_changes(
    db: Database, settings: Settings
) -> None:
    domain_id, task_id = await _domain_task(db, settings, "https://shop.test/ads")
    page = _batch(("ad", "a1", {"t": "Bike", "p": "10.00"}), ("ad", "a2", {"t": "Car"}))
    first = await _save(db, ItemInput(domain_id, task_id, page))
    assert [r for _, r in first] == ["created", "created"]
    a1, a2 = (i for i, _ in first)
    async with db.reader() as session:
        before = await session.get_one(Item, a1)
    # The same data (another key order): unchanged, same version, only last_seen_at moves.
    same = _batch(("ad", "a1", {"p": "10.00", "t": "Bike"}), ("ad", "a2", {"t": "Car"}))
    assert await _save(db, ItemInput(domain_id, task_id, same)) == [
        (a1, "unchanged"),
        (a2, "unchanged"),
    ]
    # A changed price: a new version; two pages of one group showing a2: the later one wins.
    changed = _batch(("ad", "a1", {"p": "9.00", "t": "Bike"}))
    later = _batch(("ad", "a2", {"t": "Car, sold"}), url="https://shop.test/ads?page=2")
    earlier = _batch(("ad", "a2", {"t": "Car, old"}))
    saved = await _save(
        db,
        ItemInput(domain_id, task_id, changed),
        ItemInput(domain_id, task_id, earlier),
        ItemInput(domain_id, None, later),
    )
    assert saved == [(a1, "updated"), (a2, "updated")]
    async with db.reader() as session:
        after = await session.get_one(Item, a1)
        other = await session.get_one(Item, a2)
        count = await session.scalar(select(func.count()).select_from(ItemVersion))
    assert (after.version, after.data) == (2, {"p": "9.00", "t": "Bike"})
    assert after.first_seen_at == before.first_seen_at
    assert after.changed_at > before.changed_at and after.last_seen_at > before.last_seen_at
    assert (other.version, other.data, other.url) == (2, {"t": "Car, sold"}, later.url)
    assert other.crawl_task_id is None
    assert count == 4
    assert await _versions(db, a1) == [(1, {"p": "10.00", "t": "Bike"}), (2, after.data)]
    # Another domain's item with the same kind and key is another item.
    other_domain, _ = await _domain_task(db, settings, "https://other.test/ads")
    [(a1_elsewhere, result)] = await _save(db, ItemInput(other_domain, None, changed))
    assert result == "created" and a1_elsewhere not in (a1, a2)


async def test_a_group_without_items_sends_no_statement(db: Database) -> None:
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    event.listen(db.engine.sync_engine, "before_cursor_execute", count)
    try:
        assert await _save(db) == []
        assert await _save(db, ItemInput(1, None, _batch())) == []
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", count)
    assert not [s for s in statements if "items" in s]


# -- the task path -----------------------------------------------------------------------------


async def _items(api: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    response = await api.get("/api/items", params={"limit": 100, **params})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return sorted(items, key=lambda i: i["key"])


async def test_selector_items_on_a_listing_page_recrawled_and_reparsed(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = _runtime(api)
    url = site.url("/listing/1")
    task_id = (await api.post("/api/tasks", json={"url": url})).json()["task"]["id"]
    domain_id = (await api.get(f"/api/tasks/{task_id}")).json()["domain_id"]
    path = f"/api/domains/{domain_id}/selector-parsers"
    saved = await api.post(path, json={"fields": V1, "note": "ads"})
    assert saved.status_code == 201, saved.text

    done = await crawl(runtime.db, runtime.settings, [task_id], parts=runtime.parts)
    assert done[task_id].status == "completed", done[task_id].error_message
    first = await _items(api, kind="ad")
    assert [i["key"] for i in first] == [site.url(f"/ad/{n}") for n in (10, 11, 12, 13)]
    assert first[0]["data"] == {
        "url": site.url("/ad/10"),
        "title": "Bike 10",
        "price": "10.99",
        "sold": False,
    }
    assert {(i["version"], i["parser_name"], i["parser_version"]) for i in first} == {
        (1, "selector", "1")
    }
    assert {i["crawl_task_id"] for i in first} == {task_id} and first[0]["url"] == url
    assert (await api.get("/api/products")).json()["total"] == 0

    # The editor's preview shows a trial map's items on the stored page; nothing is saved.
    preview = await api.post(f"{path}/preview", json={"fields": V2, "task_id": task_id})
    assert preview.status_code == 200, preview.text
    assert [i["data"]["seller"] for i in preview.json()["items"]] == [
        "Seller 1",
        "Seller 2",
        "Seller 0",
        "Seller 1",
    ]

    # Recrawled: a new price and a sold ad are new versions; the others stay at version 1.
    site.set_price(11, "12.50")
    site.set_price(12, "12.99", available=False)
    assert (await api.post(f"/api/tasks/{task_id}/restart")).status_code == 200
    await crawl(runtime.db, runtime.settings, [task_id], parts=runtime.parts)
    second = await _items(api, kind="ad")
    assert [i["version"] for i in second] == [1, 2, 2, 1]
    assert second[0]["last_seen_at"] > first[0]["last_seen_at"]
    assert second[0]["changed_at"] == first[0]["changed_at"]
    detail = (await api.get(f"/api/items/{second[1]['id']}")).json()
    assert [v["version"] for v in detail["versions"]] == [2, 1]
    assert detail["versions"][0]["changes"] == {"added": [], "removed": [], "changed": ["price"]}
    assert detail["versions"][0]["data"]["price"] == "12.50"
    assert detail["versions"][1]["changes"] is None and detail["versions_total"] == 2
    sold = (await api.get(f"/api/items/{second[2]['id']}")).json()
    assert sold["data"]["sold"] is True
    assert sold["versions"][0]["changes"]["changed"] == ["sold"]

    # Version 2 of the map, applied to the stored page by restart-parsing: no refetch.
    requests = len(site.log()["requests"])
    assert (await api.post(path, json={"fields": V2})).json()["version"] == 2
    restarted = await api.post(
        "/api/tasks/restart-parsing", json={"domain_id": domain_id, "outdated": True}
    )
    assert restarted.json()["task_ids"] == [task_id], restarted.text
    await crawl(runtime.db, runtime.settings, [task_id], parts=runtime.parts)
    third = await _items(api, kind="ad")
    assert [i["version"] for i in third] == [2, 3, 3, 2]
    assert {i["parser_version"] for i in third} == {"2"}
    assert third[0]["data"]["seller"] == "Seller 1"
    latest = (await api.get(f"/api/items/{third[0]['id']}")).json()["versions"][0]
    assert latest["changes"] == {"added": ["seller"], "removed": [], "changed": []}
    assert len(site.log()["requests"]) == requests
    assert await restart_parsing_bulk(runtime.db, runtime.pages, outdated=True) == []


async def test_a_parser_registered_by_code_gives_items_in_the_parse_processes(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(parser_modules=["tests.test_items"], parse_processes=1)
    db = await open_database(settings)
    try:
        [outcome] = await submit_urls(
            db, settings, [SubmitSpec(url=site.url("/listing/2"), parser_name="test-listing")]
        )
        assert outcome.task_id is not None
        done = await crawl(db, settings, [outcome.task_id])
        assert done[outcome.task_id].status == "completed", done[outcome.task_id].error_message
        async with db.reader() as session:
            items = list(await session.scalars(select(Item).order_by(Item.item_key)))
            versions = await session.scalar(select(func.count()).select_from(ItemVersion))
        assert [(i.kind, i.item_key) for i in items] == [("ad", f"ad-{n}") for n in range(20, 24)]
        assert items[0].data == {"title": "Bike 20", "price": "1.50"}
        assert {(i.parser_name, i.parser_version) for i in items} == {("test-listing", "7")}
        assert versions == 4
    finally:
        await db.dispose()


# -- the API -------------------------------------------------------------------------------------


async def test_items_api_filters_search_versions_and_exports(api: httpx.AsyncClient) -> None:
    runtime = _runtime(api)
    db, settings = runtime.db, runtime.settings
    shop, shop_task = await _domain_task(db, settings, "https://shop.test/ads")
    other, _ = await _domain_task(db, settings, "https://other.test/list")
    start = utcnow()
    [(bike, _), (formula, _)] = await _save(
        db,
        ItemInput(
            shop,
            shop_task,
            _batch(("ad", "b1", {"title": "Red Bike", "price": "10.00"}), ("ad", "=cmd", {})),
        ),
    )
    [(flat, _)] = await _save(
        db, ItemInput(other, None, _batch(("listing", "f1", {"title": "Flat", "rooms": 3})))
    )
    for price in ("9.00", "8.00"):
        await _save(
            db,
            ItemInput(shop, shop_task, _batch(("ad", "b1", {"title": "Red Bike", "price": price}))),
        )

    assert [i["id"] for i in (await api.get("/api/items")).json()["items"]] == [bike, flat, formula]
    assert [i["id"] for i in await _items(api, kind="listing")] == [flat]
    assert [i["id"] for i in await _items(api, domain="other.test")] == [flat]
    assert [i["id"] for i in await _items(api, task_id=shop_task)] == [formula, bike]
    assert [i["id"] for i in await _items(api, q="bike RED")] == [bike]
    assert [i["id"] for i in await _items(api, q="3")] == [flat]  # numbers are searched too
    assert await _items(api, q="red flat") == []
    assert await _items(api, q="%") == []  # no word: nothing, not everything
    since = (start - timedelta(seconds=1)).isoformat()
    assert len(await _items(api, changed_since=since)) == 3
    later = (utcnow() + timedelta(hours=1)).isoformat()
    assert await _items(api, changed_since=later) == []
    assert (await api.get("/api/items", params={"kind": "Not A Kind"})).status_code == 422

    detail = (await api.get(f"/api/items/{bike}")).json()
    assert (detail["version"], detail["data"]["price"], detail["versions_total"]) == (3, "8.00", 3)
    page = (await api.get(f"/api/items/{bike}/versions", params={"limit": 1, "offset": 1})).json()
    assert page["total"] == 3
    [middle] = page["items"]
    assert (middle["version"], middle["changes"]["changed"]) == (2, ["price"])
    assert (await api.get("/api/items/999999")).status_code == 404
    assert (await api.get("/api/items/999999/versions")).status_code == 404

    lines = (await api.get("/api/items/export.jsonl", params={"kind": "ad"})).text.splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["id"], r["key"], r["version"]) for r in records] == [
        (bike, "b1", 3),
        (formula, "=cmd", 1),
    ]
    assert records[0]["data"] == {"title": "Red Bike", "price": "8.00"}
    exported = await api.get("/api/items/export.csv")
    assert exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [r["key"] for r in rows] == ["b1", "'=cmd", "f1"]  # a formula is defused
    assert json.loads(rows[2]["data"]) == {"rooms": 3, "title": "Flat"}
    assert rows[2]["crawl_task_id"] == ""


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        (
            {"items": [{"kind": "ad", "each": {"css": ".ad"}, "key": "x", "fields": {"t": {}}}]},
            "fields.items.0.key",
            "identifies an item",
        ),
        (
            {
                "items": [
                    {
                        "kind": "ad",
                        "each": {"css": ".ad"},
                        "key": "t",
                        "fields": {"t": {"xpath": ".//h2"}},
                    }
                ]
            },
            "fields.items.0.fields.t",
            "inside a block matched by css",
        ),
        (
            {
                "items": [
                    {
                        "kind": "ad",
                        "each": {"xpath": "//a"},
                        "key": "t",
                        "fields": {"t": {"xpath": "//h2"}},
                    }
                ]
            },
            "fields.items.0.fields.t.xpath",
            "starts with '.'",
        ),
        (
            {
                "items": [
                    {"kind": "ad", "each": {"xpath": "#\b\u0002"}, "key": "t", "fields": {"t": {}}}
                ]
            },
            "fields.items.0.each.xpath",
            "not an XPath",
        ),
        (
            {"items": [{"kind": "Ad!", "each": {"css": ".ad"}, "key": "t", "fields": {"t": {}}}]},
            "fields.items.0.kind",
            "a name like ad",
        ),
        ({"price": {"css": ".p"}, "items": V1["items"]}, "fields", "product_name needs a rule"),
        ({"items": []}, "fields.items", "1 to 5 item extractors"),
    ],
)
async def test_bad_item_extractors_are_refused_naming_them(
    api: httpx.AsyncClient, fields: dict[str, Any], field: str, reason: str
) -> None:
    domain = (await api.post("/api/domains", json={"domain_name": "ads.test"})).json()
    response = await api.post(
        f"/api/domains/{domain['id']}/selector-parsers", json={"fields": fields}
    )
    assert response.status_code == 422, response.text
    [error] = response.json()["errors"]
    assert error["field"] == field and reason in error["message"], error
