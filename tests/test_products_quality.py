"""Data quality on both engines: validation kept not dropped, confidence stored and served,
content_hash skipping unchanged recrawls, and bulk restart-parsing after a parser version bump."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from forager.api.deps import Runtime
from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Domain, PriceHistory, Product
from forager.parse.base import ProductRecord
from forager.parse.generic import GenericParser
from forager.parse.prices import to_decimal
from forager.parse.quality import validate
from forager.products.persist import content_hash, save_product
from tests.support.crawling import crawl, submit
from tests.support.site import TestSite
from tests.support.waiting import task_attempts


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def _product(db: Database, task_id: int) -> Product:
    async with db.reader() as session:
        product = await session.scalar(select(Product).where(Product.crawl_task_id == task_id))
    assert product is not None
    return product


async def test_a_result_breaking_a_rule_is_kept_with_its_violations(
    db: Database, settings: Settings, site: TestSite
) -> None:
    site.set_price(11, Decimal("-5.00"))
    good, bad = await submit(db, settings, site.url("/product/12"), site.url("/product/11"))
    tasks = await crawl(db, settings, [good, bad])
    assert tasks[bad].status == "completed"  # kept, not dropped or retried
    product = await _product(db, bad)
    assert product.price == Decimal("-5.00")  # as extracted, never "fixed"
    assert product.quality_issues == ["price -5.00 is not positive"]
    attempts = await task_attempts(db, bad)
    assert [(a.phase, a.outcome, a.error_type) for a in attempts] == [
        ("fetch", "success", None),
        ("parse", "validation", "validation"),
    ]
    assert attempts[1].error_message == "price -5.00 is not positive"
    clean = await _product(db, good)
    assert clean.quality_issues == []
    assert clean.field_confidence is not None
    assert clean.field_confidence["price"] == pytest.approx(0.9)  # JSON-LD offer
    assert clean.field_confidence["product_name"] == pytest.approx(0.95)  # matches the <h1>
    assert [(a.phase, a.outcome) for a in await task_attempts(db, good)] == [("fetch", "success")]


def _record(**changes: Any) -> ProductRecord:
    fields: dict[str, Any] = {
        "url": "https://shop.example/p/1",
        "product_name": "Lamp",
        "price": Decimal("10.00"),
        "currency": "EUR",
        "image_urls": ["https://shop.example/1.jpg"],
        "parser_name": "generic",
        "parser_version": "1",
        "field_confidence": {"product_name": 0.9, "price": 0.9},
    }
    return ProductRecord(**{**fields, **changes})


async def _domain(db: Database) -> int:
    """A domain for products to belong to; its id."""
    async with db.session() as session:
        domain = Domain(
            domain_name="shop.example",
            base_url="https://shop.example",
            parser_name="generic",
            user_agent="Forager-test",
        )
        session.add(domain)
        await session.flush()
        return domain.id


async def test_content_hash_covers_the_fields_so_unchanged_writes_nothing(db: Database) -> None:
    assert content_hash(_record()) == content_hash(_record(parser_version="2"))
    assert content_hash(_record()) != content_hash(_record(price=Decimal("10.01")))
    assert content_hash(_record()) != content_hash(_record(image_urls=[]))
    domain_id = await _domain(db)

    async def save(record: ProductRecord) -> str:
        async with db.session() as session:
            _, result = await save_product(
                session, domain_id=domain_id, task_id=None, url=record.url, url_hash="h1",
                record=record,
            )  # fmt: skip
            return result

    async def state() -> tuple[Any, ...]:
        async with db.reader() as session:
            product = await session.scalar(select(Product))
            history = await session.scalar(select(func.count()).select_from(PriceHistory))
        assert product is not None
        return product.updated_at, product.parser_version, product.price, history

    assert await save(_record()) == "created"
    first = await state()
    assert await save(_record()) == "unchanged"
    assert await state() == first  # not even updated_at moved
    # A new parser version reading the same values: provenance only, no price history.
    assert await save(_record(parser_version="2")) == "reparsed"
    reparsed = await state()
    assert (reparsed[1], reparsed[2], reparsed[3]) == ("2", Decimal("10.00"), 1)
    assert await save(_record(parser_version="2", price=Decimal("9.50"))) == "updated"
    assert (await state())[2:] == (Decimal("9.50"), 2)


async def test_a_price_no_column_can_hold_is_kept_as_an_issue_not_a_failed_save(
    db: Database,
) -> None:
    domain_id = await _domain(db)
    record = _record(price=to_decimal("1.5e15"))
    record.quality_issues = validate(record)
    assert record.quality_issues == ["price 1.5E+15 is implausibly large"]
    async with db.session() as session:
        _, result = await save_product(
            session, domain_id=domain_id, task_id=None, url=record.url, url_hash="h2",
            record=record,
        )  # fmt: skip
    assert result == "created"
    async with db.reader() as session:
        product = await session.scalar(select(Product))
    assert product is not None
    assert (product.price, product.quality_issues) == (None, record.quality_issues)


async def test_restart_parsing_in_bulk_after_a_parser_version_bump(
    api: httpx.AsyncClient, site: TestSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = _runtime(api)
    ids = [
        (await api.post("/api/tasks", json={"url": site.url(f"/product/{n}")})).json()["task"]["id"]
        for n in (21, 22)
    ]
    other = await api.post("/api/tasks", json={"url": site.url("/product/23", host="127.0.0.2")})
    ids.append(other.json()["task"]["id"])
    await crawl(runtime.db, runtime.settings, ids)
    fetched = len(site.requests())
    product = await _product(runtime.db, ids[0])
    async with runtime.db.reader() as session:
        domain_name = await session.scalar(
            select(Domain.domain_name).where(Domain.id == product.domain_id)
        )

    # Nothing is outdated yet.
    response = await api.post("/api/tasks/restart-parsing", json={"outdated": True})
    assert response.status_code == 200, response.text
    assert response.json() == {"restarted": 0, "task_ids": []}

    old, new = GenericParser.version, str(int(GenericParser.version) + 1)
    monkeypatch.setattr(GenericParser, "version", new)
    response = await api.post(
        "/api/tasks/restart-parsing", json={"domain": domain_name, "outdated": True}
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"restarted": 2, "task_ids": sorted(ids[:2])}
    for task_id in ids[:2]:
        detail = (await api.get(f"/api/tasks/{task_id}")).json()
        assert detail["status"] == "downloaded"
        assert detail["events"][-1]["event"] == "restart_parsing"
    assert (await api.get(f"/api/tasks/{ids[2]}")).json()["status"] == "completed"

    await crawl(runtime.db, runtime.settings, ids[:2])
    assert len(site.requests()) == fetched  # parsed from the stored pages, no fetch
    for task_id in ids[:2]:
        body = (await api.get(f"/api/products/{(await _product(runtime.db, task_id)).id}")).json()
        assert (body["parser_name"], body["parser_version"]) == ("generic", new)
        assert body["quality_issues"] == []
        assert body["field_confidence"]["price"] == 0.9
        assert len(body["price_history"]) == 1  # same content: no new history row

    # The other domain's page is still read by the old version; a version filter finds it.
    response = await api.post(
        "/api/tasks/restart-parsing", json={"parser_version_below": new, "limit": 5}
    )
    assert old != new
    assert response.json() == {"restarted": 1, "task_ids": [ids[2]]}


async def test_restart_parsing_in_bulk_can_take_failed_parses_too(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = _runtime(api)
    ids = [
        (await api.post("/api/tasks", json={"url": site.url(path)})).json()["task"]["id"]
        for path in ("/notproduct", "/product/31")
    ]
    tasks = await crawl(runtime.db, runtime.settings, ids)
    assert (tasks[ids[0]].status, tasks[ids[0]].error_type) == ("failed", "parse")
    assert tasks[ids[1]].status == "completed"
    # Version filters alone never pick a page without a product ...
    response = await api.post("/api/tasks/restart-parsing", json={"parser_version_below": "999"})
    assert response.json() == {"restarted": 1, "task_ids": [ids[1]]}
    await crawl(runtime.db, runtime.settings, ids[1:])
    # ... parse_failures alone picks only the failed parse, from its stored page.
    response = await api.post("/api/tasks/restart-parsing", json={"parse_failures": True})
    assert response.json() == {"restarted": 1, "task_ids": [ids[0]]}
    assert (await api.get(f"/api/tasks/{ids[0]}")).json()["status"] == "downloaded"


async def test_restart_parsing_in_bulk_refuses_bad_filters(api: httpx.AsyncClient) -> None:
    for body, field in (
        ({"limit": 0}, "limit"),
        ({"parser_version_below": "1; drop"}, "parser_version_below"),
        ({"domain_id": 0}, "domain_id"),
        ({"outdated": True, "surprise": 1}, "surprise"),
    ):
        response = await api.post("/api/tasks/restart-parsing", json=body)
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["field"] == field
