"""Alert rules and change detection (issue 17): what fires, what does not, in the change's
transaction. Price watchers' usual bugs are the cases: a threshold fires on every crossing, a
rule may fire on the first observation, ±0.01 noise is filtered, a crawl that read no price is
not a change, and rules apply to a domain or a batch, not only to one product."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import select

from forager.alerts import admin, detect
from forager.alerts.admin import RuleSpec
from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import AlertDelivery, Domain
from forager.parse.base import ProductRecord
from forager.products.persist import save_product
from tests.support.crawling import crawl, submit
from tests.support.site import TestSite

HOOK = "http://127.0.0.1:9/forager"  # nothing listens: deliveries fail fast


async def _rule(db: Database, settings: Settings, name: str, kind: str, **values: Any) -> int:
    rule, _ = await admin.create_rule(
        db,
        SecretBox(settings),
        RuleSpec(name=name, kind=kind, webhook_url=HOOK, **values),
        private_targets=settings.private_targets,
    )
    return rule.id


async def _fired(db: Database) -> Counter[str]:
    async with db.reader() as session:
        rows = await session.execute(select(AlertDelivery.payload).order_by(AlertDelivery.id))
        return Counter(payload["rule"]["name"] for (payload,) in rows)


async def _domain(db: Database, name: str) -> int:
    async with db.session() as session:
        row = Domain(domain_name=name, base_url=f"https://{name}", parser_name="generic",
                     user_agent="t")  # fmt: skip
        session.add(row)
        await session.flush()
        return row.id


async def test_price_and_stock_rules_over_a_run_of_crawls(db: Database, settings: Settings) -> None:
    shop = await _domain(db, "shop.example")
    other = await _domain(db, "other.example")
    t = Decimal("100")
    await _rule(db, settings, "below", "price_below", threshold=t)
    await _rule(db, settings, "below-first", "price_below", threshold=t, fire_on_first=True,
                domain_id=shop)  # fmt: skip
    await _rule(db, settings, "other-domain", "price_below", threshold=t, domain_id=other)
    await _rule(db, settings, "drop", "price_drop", percent=5, min_change_abs=Decimal("0.05"))
    await _rule(db, settings, "rise", "price_rise", min_change_pct=1)
    await _rule(db, settings, "restock", "back_in_stock")
    await _rule(db, settings, "restock-first", "back_in_stock", fire_on_first=True)

    async def crawled(price: str | None, available: bool | None) -> Counter[str]:
        before = await _fired(db)
        record = ProductRecord(
            url="https://shop.example/p/1",
            product_name="Kettle",
            price=None if price is None else Decimal(price),
            currency="EUR",
            is_available=available,
        )
        async with db.session() as session:
            await save_product(session, domain_id=shop, task_id=None, url=record.url,
                               url_hash="p1", record=record)  # fmt: skip
        return await _fired(db) - before

    # First sight, already below the threshold: only the opted-in rule of this domain fires.
    assert await crawled("95.00", False) == {"below-first": 1}
    assert await crawled("120.00", False) == {"rise": 1}
    assert await crawled("99.99", False) == {"below": 1, "below-first": 1, "drop": 1}
    assert await crawled("99.98", False) == {}  # 0.01 down: noise for "drop", still below
    # A crawl that read neither price nor stock is not a change; the last good values stand.
    assert await crawled(None, None) == {}
    assert await crawled("99.98", True) == {"restock": 1, "restock-first": 1}
    assert await crawled("130.00", True) == {"rise": 1}
    # Crossing again fires again (not only the first time).
    assert await crawled("90.00", True) == {"below": 1, "below-first": 1, "drop": 1}
    assert await crawled("90.00", False) == {}
    assert await crawled("90.00", True) == {"restock": 1, "restock-first": 1}


async def test_failed_task_breaker_and_batch_scope_fire_from_a_real_crawl(
    make_settings: Any, site: TestSite
) -> None:
    settings = make_settings(breaker_failure_threshold=1, max_retries=0)
    from forager.runtime import open_database

    db = await open_database(settings)
    detect.install()
    try:
        [good] = await submit(db, settings, site.url("/product/7"), batch_name="watch")
        await _rule(db, settings, "failed-in-batch", "task_failed", batch_name="watch")
        await _rule(db, settings, "failed-anywhere", "task_failed")
        await _rule(db, settings, "breaker", "breaker_opened")
        await _rule(db, settings, "stocked", "back_in_stock", fire_on_first=True,
                    batch_name="watch")  # fmt: skip
        await _rule(db, settings, "stocked-elsewhere", "back_in_stock", fire_on_first=True,
                    batch_name="other")  # fmt: skip
        [bad] = await submit(db, settings, site.url("/status/500"))
        tasks = await crawl(db, settings, [good, bad])
        assert (tasks[good].status, tasks[bad].status) == ("completed", "failed")
        assert await _fired(db) == {"failed-anywhere": 1, "breaker": 1, "stocked": 1}
        async with db.reader() as session:
            failed = await session.scalar(
                select(AlertDelivery.payload).where(AlertDelivery.event == "task_failed")
            )
        assert failed is not None
        assert failed["task"]["id"] == bad and failed["task"]["error_type"] == "http_5xx"
    finally:
        await db.dispose()


@pytest.mark.parametrize(
    ("kind", "values", "field"),
    [
        ("price_below", {}, "threshold"),
        ("price_drop", {"threshold": Decimal(1)}, "threshold"),
        ("agent_blocked", {"domain_id": 1}, "domain_id"),
        ("mission_failed", {"fire_on_first": True}, "fire_on_first"),
        ("task_failed", {"min_change_abs": Decimal(1)}, "min_change_abs"),
    ],
)
def test_a_rule_that_does_not_fit_its_kind_is_refused(
    kind: str, values: dict[str, Any], field: str
) -> None:
    from forager.errors import InvalidRequest

    with pytest.raises(InvalidRequest) as refused:
        admin.check(RuleSpec(name="x", kind=kind, webhook_url=HOOK, **values))
    assert refused.value.field == field


def test_every_kind_is_in_the_api() -> None:
    from typing import get_args

    from forager.alerts.rules import KINDS
    from forager.api.alert_schemas import AlertKind

    assert set(get_args(AlertKind)) == set(KINDS)


async def test_agent_and_mission_events_fire_their_rules_in_the_same_transaction(
    db: Database, settings: Settings
) -> None:
    from forager.db import audit

    detect.install()
    await _rule(db, settings, "blocked", "agent_blocked")
    await _rule(db, settings, "done", "mission_finished")
    await _rule(db, settings, "broken", "mission_failed")
    async with db.session() as session:
        audit.record(session, "agent", [3], "blocked", {"to": "blocked", "reason": "captcha"})
        audit.record(session, "mission", [5], "mission_completed", {"ads": 12})
        audit.record(session, "mission", [6], "scrape_failed", {})  # not an alert event

    async def failing() -> None:  # rolled back: neither the event nor a delivery stays
        async with db.session() as session:
            audit.record(session, "mission", [6], "mission_failed", {})
            raise RuntimeError

    with pytest.raises(RuntimeError):
        await failing()
    assert await _fired(db) == {"blocked": 1, "done": 1}
