"""A product alert's payload (issue 34): a crawl that read no availability does not make an
in-stock product `"is_available": null`; the payload says the value is the last one read."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import select

from forager.alerts import admin
from forager.alerts.admin import RuleSpec
from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import AlertDelivery, Domain
from forager.parse.base import ProductRecord
from forager.products.persist import save_product


async def _crawled(db: Database, domain_id: int, price: str, available: bool | None) -> None:
    record = ProductRecord(
        url="https://shop.example/p/1",
        product_name="Kettle",
        price=Decimal(price),
        currency="EUR",
        is_available=available,
    )
    async with db.session() as session:
        await save_product(
            session, domain_id=domain_id, task_id=None, url=record.url, url_hash="p1",
            record=record,
        )  # fmt: skip


async def _payloads(db: Database) -> list[dict[str, Any]]:
    async with db.reader() as session:
        rows = await session.scalars(select(AlertDelivery.payload).order_by(AlertDelivery.id))
        return [p["product"] for p in rows]


async def test_a_crawl_without_availability_keeps_the_last_one_read(
    db: Database, settings: Settings
) -> None:
    async with db.session() as session:
        shop = Domain(domain_name="shop.example", base_url="https://shop.example",
                      parser_name="generic", user_agent="t")  # fmt: skip
        session.add(shop)
        await session.flush()
        domain_id = shop.id
    await admin.create_rule(
        db,
        SecretBox(settings),
        RuleSpec(name="drop", kind="price_drop", percent=5, webhook_url="http://127.0.0.1:9/h"),
        private_targets=settings.private_targets,
    )
    await _crawled(db, domain_id, "100.00", True)
    await _crawled(db, domain_id, "80.00", None)  # in stock, but this crawl read no stock
    await _crawled(db, domain_id, "60.00", False)
    first, second = await _payloads(db)
    assert (first["price"], first["is_available"], first["availability_read"]) == (
        "80.00",
        True,
        False,
    )
    assert first["was_available"] is True
    assert (second["price"], second["is_available"], second["availability_read"]) == (
        "60.00",
        False,
        True,
    )
