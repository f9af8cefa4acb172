"""The whole pipeline against the local test site, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import func, select, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import (
    CrawlTask,
    Domain,
    DomainProxy,
    Event,
    PriceHistory,
    Product,
    ProductImage,
    Proxy,
)
from forager.db.types import utcnow
from forager.queue.door import TaskQueue
from forager.store import packs
from forager.store.pages import LocalPageStore
from forager.worker.pool import WorkerPool
from tests.conftest import SettingsFactory
from tests.support.crawling import add_proxy, crawl, submit, tasks_by_id
from tests.support.proxy import TestProxy
from tests.support.site import TestSite
from tests.support.waiting import eventually, task_attempts


async def _product(db: Database, task_id: int) -> Product | None:
    async with db.reader() as session:
        return await session.scalar(select(Product).where(Product.crawl_task_id == task_id))


async def _history(db: Database, product_id: int) -> list[PriceHistory]:
    async with db.reader() as session:
        rows = await session.scalars(
            select(PriceHistory)
            .where(PriceHistory.product_id == product_id)
            .order_by(PriceHistory.id)
        )
        return list(rows)


async def test_product_page_end_to_end(db: Database, settings: Settings, site: TestSite) -> None:
    [task_id] = await submit(db, settings, site.url("/product/5"))
    task = (await crawl(db, settings, [task_id]))[task_id]
    assert task.status == "completed", task.error_message
    assert (task.http_status_code, task.error_type, task.lease_owner) == (200, None, None)
    product = await _product(db, task_id)
    assert product is not None
    assert product.product_name == "Test Product 5"  # the main product, not the decoy
    assert (product.price, product.currency, product.is_available) == (Decimal("5.99"), "USD", True)
    assert product.sku == "SKU-5"
    assert (product.parser_name, product.parser_version) == ("generic", "5")
    assert len(product.content_hash) == 64
    async with db.reader() as session:
        images = list(
            await session.scalars(
                select(ProductImage.image_url)
                .where(ProductImage.product_id == product.id)
                .order_by(ProductImage.position)
            )
        )
        events = list(
            await session.scalars(
                select(Event.event)
                .where(Event.entity_type == "task", Event.entity_id == str(task_id))
                .order_by(Event.id)
            )
        )
    assert images == [site.url("/img/5-1.jpg"), site.url("/img/5-2.jpg")]
    assert events == [
        "created",
        "queued",
        "crawling",
        "downloaded",
        "queued_parse",
        "parsing",
        "completed",
    ]
    [attempt] = await task_attempts(db, task_id)
    assert (attempt.outcome, attempt.status_code, attempt.phase) == ("success", 200, "fetch")
    assert attempt.bytes_received and attempt.bytes_received > 10_000
    assert attempt.page_path == task.html_path
    page = await LocalPageStore(settings.pages_dir).get(task.html_path or "")
    assert b"Test Product 5" in page
    assert packs.parse_key(task.html_path or "")[2] < len(page) / 2  # gzipped
    [point] = await _history(db, product.id)
    assert point.price == Decimal("5.99")


async def test_recrawl_appends_history_only_on_change(
    db: Database, settings: Settings, site: TestSite
) -> None:
    [task_id] = await submit(
        db, settings, site.url("/product/7"), is_recurring=True, crawl_frequency_seconds=3600
    )
    queue = TaskQueue(db, settings)

    async def recrawl() -> None:
        async with db.session() as session:
            await session.execute(
                update(CrawlTask)
                .where(CrawlTask.id == task_id)
                .values(next_crawl_at=utcnow() - timedelta(seconds=1))
            )
        assert await queue.requeue_due_recrawls() == 1
        assert (await crawl(db, settings, [task_id]))[task_id].status == "completed"

    await crawl(db, settings, [task_id])
    product = await _product(db, task_id)
    assert product is not None
    await recrawl()  # nothing changed on the page
    unchanged = await _product(db, task_id)
    assert unchanged is not None
    assert unchanged.updated_at == product.updated_at
    assert len(await _history(db, product.id)) == 1
    site.set_price(7, "12.50", available=False)
    await recrawl()
    changed = await _product(db, task_id)
    assert changed is not None
    assert (changed.price, changed.is_available) == (Decimal("12.50"), False)
    assert changed.content_hash != product.content_hash
    history = await _history(db, product.id)
    assert [(h.price, h.is_available) for h in history] == [
        (Decimal("7.99"), True),
        (Decimal("12.50"), False),
    ]
    assert len(await task_attempts(db, task_id)) == 3
    task = (await tasks_by_id(db, [task_id]))[task_id]
    assert task.recrawl_count == 2
    assert task.next_crawl_at and task.next_crawl_at > utcnow() + timedelta(minutes=59)


async def test_amazon_pages_with_the_amazon_parser(
    db: Database, settings: Settings, site: TestSite
) -> None:
    ids = await submit(
        db,
        settings,
        site.url("/amazon/dp/B0TEST0001"),
        site.url("/amazon-br/dp/B0TEST0001"),
        parser_name="amazon",
    )
    tasks = await crawl(db, settings, ids)
    assert {t.status for t in tasks.values()} == {"completed"}
    us, br = [await _product(db, i) for i in ids]
    assert us is not None and br is not None
    assert (us.price, us.currency, us.original_price) == (
        Decimal("1299.90"),
        "USD",
        Decimal("1499.00"),
    )
    assert (br.price, br.currency, br.rating, br.review_count) == (
        Decimal("1299.90"),
        "BRL",
        Decimal("4.5"),
        1234,
    )
    assert br.asin == "B0TEST0001"


async def test_captcha_is_retried_then_failed_never_stored(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_retries=2)
    [task_id] = await submit(db, settings, site.url("/captcha"), parser_name="amazon")
    task = (await crawl(db, settings, [task_id]))[task_id]
    assert (task.status, task.error_type, task.retry_count) == ("failed", "captcha", 2)
    assert "robot check" in (task.error_message or "")
    assert await _product(db, task_id) is None
    attempts = await task_attempts(db, task_id)
    assert [a.outcome for a in attempts] == ["retry", "retry", "failed"]
    assert {a.error_type for a in attempts} == {"captcha"}


async def test_http_errors(db: Database, make_settings: SettingsFactory, site: TestSite) -> None:
    settings = make_settings(max_retries=1)
    gone, flaky, limited, not_product = await submit(
        db,
        settings,
        site.url("/status/404"),
        site.url("/flaky/abc?fail=1&code=500"),
        site.url("/status/429"),
        site.url("/notproduct"),
    )
    tasks = await crawl(db, settings, [gone, flaky, limited, not_product])
    assert (tasks[gone].status, tasks[gone].error_type, tasks[gone].retry_count) == (
        "failed",
        "http_4xx",
        0,
    )
    assert (tasks[flaky].status, tasks[flaky].retry_count) == ("completed", 1)
    assert [a.status_code for a in await task_attempts(db, flaky)] == [500, 200]
    assert (tasks[limited].status, tasks[limited].error_type) == ("failed", "rate_limited")
    assert len(await task_attempts(db, limited)) == 2
    assert (tasks[not_product].status, tasks[not_product].error_type) == ("failed", "parse")
    assert "not a product page" in (tasks[not_product].error_message or "")


async def test_size_limits_hold_for_plain_and_compressed_bodies(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_body_bytes=2 * 1024 * 1024, max_retries=0)
    ids = await submit(
        db,
        settings,
        site.url("/big?mb=50"),
        site.url("/big-declared?mb=50"),
        site.url("/gzip-bomb?mb=200"),
    )
    tasks = await crawl(db, settings, ids)
    for task_id in ids:
        assert (tasks[task_id].status, tasks[task_id].error_type) == ("failed", "too_large")
    assert "limit" in (tasks[ids[2]].error_message or "")


async def test_redirects_are_followed_and_bounded(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_redirects=5, max_retries=0)
    ok, loop = await submit(db, settings, site.url("/redirect/3"), site.url("/redirect-loop"))
    tasks = await crawl(db, settings, [ok, loop])
    assert tasks[ok].status == "completed"
    [attempt] = await task_attempts(db, ok)
    assert attempt.final_url == site.url("/product/1")
    assert (tasks[loop].status, tasks[loop].error_type) == ("failed", "http_4xx")
    assert "redirects" in (tasks[loop].error_message or "")


async def test_timeouts(db: Database, make_settings: SettingsFactory, site: TestSite) -> None:
    settings = make_settings(fetch_timeout_seconds=0.3, max_retries=0)
    [task_id] = await submit(db, settings, site.url("/slow/3000"))
    task = (await crawl(db, settings, [task_id]))[task_id]
    assert (task.status, task.error_type) == ("failed", "timeout")


async def test_domain_user_agent_is_sent(db: Database, settings: Settings, site: TestSite) -> None:
    [task_id] = await submit(db, settings, site.url("/echo-headers"))
    await crawl(db, settings, [task_id])
    [attempt] = await task_attempts(db, task_id)
    page = await LocalPageStore(settings.pages_dir).get(attempt.page_path or "")
    headers = {k.lower(): v for k, v in json.loads(page).items()}
    assert headers["user-agent"] == settings.user_agent


async def test_mapped_proxies_rotate_lru_and_track_health(
    db: Database, settings: Settings, site: TestSite, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    ids = await submit(
        db, settings, *[site.url(f"/product/{n}", host="127.0.0.3") for n in range(4)]
    )
    domain_id = (await tasks_by_id(db, ids))[ids[0]].domain_id
    async with db.session() as session:  # only page fetches go through the proxies
        await session.execute(
            update(Domain).where(Domain.id == domain_id).values(ignore_robots=True)
        )
    with (
        TestProxy() as open_proxy,
        TestProxy(username="crawler", password="s3cr3t:@/") as auth_proxy,
    ):
        open_id = await add_proxy(db, settings, open_proxy, domain_id)
        auth_id = await add_proxy(db, settings, auth_proxy, domain_id)
        tasks = await crawl(db, settings, ids, concurrency=1)
        assert {t.status for t in tasks.values()} == {"completed"}
        assert (open_proxy.count, auth_proxy.count) == (2, 2)  # least recently used alternates
        assert {t.proxy_id for t in tasks.values()} == {open_id, auth_id}
        async with db.reader() as session:
            proxies = {p.id: p for p in await session.scalars(select(Proxy))}
            stored = proxies[auth_id].proxy_password or ""
        assert "s3cr3t" not in stored  # encrypted at rest
        assert proxies[open_id].success_count == 2
        assert proxies[open_id].avg_response_time_ms is not None

        # A proxy that breaks counts failures for that domain; the retry goes through the other.
        open_proxy.fail = True
        site.reset()
        [again] = await submit(db, settings, site.url("/product/99", host="127.0.0.3"))
        task = (await crawl(db, settings, [again], concurrency=1))[again]
    assert task.status == "completed"
    assert task.proxy_id == auth_id
    assert "s3cr3t" not in caplog.text
    outcomes = [(a.proxy_id, a.error_type) for a in await task_attempts(db, again)]
    assert outcomes == [(open_id, "proxy"), (auth_id, None)]
    async with db.reader() as session:
        mapping = await session.scalar(select(DomainProxy).where(DomainProxy.proxy_id == open_id))
    assert mapping is not None and mapping.failure_count == 1


async def test_cancelled_while_crawling_is_left_cancelled(
    db: Database, settings: Settings, site: TestSite
) -> None:
    [task_id] = await submit(db, settings, site.url("/hold/cancelled"))
    pool = WorkerPool(db, settings, concurrency=1)
    runner = asyncio.create_task(pool.run())
    try:
        await eventually(lambda: site.held("cancelled") == 1, "the request in flight")
        async with db.session() as session:
            await session.execute(
                update(CrawlTask).where(CrawlTask.id == task_id).values(status="cancelled")
            )
        site.release("cancelled")  # the page arrives after the cancel
        await eventually(lambda: pool.processed == 1, "the worker to finish the task")
    finally:
        pool.stop()
        await runner
    assert (await tasks_by_id(db, [task_id]))[task_id].status == "cancelled"
    [attempt] = await task_attempts(db, task_id)
    assert attempt.outcome == "discarded"
    assert await _product(db, task_id) is None


async def test_shutdown_releases_unfinished_tasks(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(shutdown_seconds=0.2)
    ids = await submit(db, settings, *[site.url(f"/slow/{3000 + n}") for n in range(3)])
    pool = WorkerPool(db, settings, concurrency=3)
    runner = asyncio.create_task(pool.run())
    await eventually(lambda: len(pool.jobs) == 3, "the pool to hold all three tasks")
    pool.stop()
    await runner
    tasks = await tasks_by_id(db, ids)
    assert {(t.status, t.retry_count, t.lease_owner) for t in tasks.values()} == {
        ("pending", 0, None)
    }
    async with db.reader() as session:
        released = await session.scalar(
            select(func.count()).select_from(Event).where(Event.event == "released")
        )
    assert released == 3


async def test_proxy_password_never_reaches_errors_or_logs(
    db: Database, make_settings: SettingsFactory, site: TestSite, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = make_settings(max_retries=1)
    [task_id] = await submit(db, settings, site.url("/product/3", host="127.0.0.4"))
    domain_id = (await tasks_by_id(db, [task_id]))[task_id].domain_id
    with TestProxy(username="crawler", password="hunter2-secret") as proxy:
        proxy.fail = True
        await add_proxy(db, settings, proxy, domain_id)
        task = (await crawl(db, settings, [task_id], concurrency=1))[task_id]
    assert (task.status, task.error_type) == ("failed", "proxy")
    texts = [task.error_message or ""] + [
        a.error_message or "" for a in await task_attempts(db, task_id)
    ]
    async with db.reader() as session:
        texts += [str(e.details) for e in await session.scalars(select(Event))]
    assert all("hunter2-secret" not in text for text in texts)
    assert "hunter2-secret" not in caplog.text
