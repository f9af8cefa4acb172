"""Issue 33: fetchers that escalate. A domain whose fetcher is ``auto`` is fetched with the
cheapest fetcher that works: a site that refuses plain HTTP clients by their TLS fingerprint gets
``impersonate``, a page whose price appears only after JavaScript gets the browser; the domain
remembers what worked and why (API, events), tries the cheapest again after the probe interval,
and two processes agree on the memory (compare-and-set)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Domain, Event, Product
from forager.db.types import utcnow
from forager.domains import admin
from forager.domains import escalation as memory
from forager.fetch.base import FetchRequest, FetchResponse
from forager.fetch.fetcher_set import for_files
from forager.parse.scripted import needs_scripts
from forager.queue.door import ClaimedTask
from forager.queue.lifecycle import TERMINAL
from forager.worker.escalation import Escalation
from forager.worker.parsing import Parsed
from forager.worker.pool import WorkerPool
from tests.conftest import SettingsFactory
from tests.support import pages
from tests.support.crawling import crawl, submit, tasks_by_id
from tests.support.fetching import require
from tests.support.fingerprint import FingerprintGate
from tests.support.site import TestSite
from tests.support.socks import make_certificates

PRICE = Decimal("12.50")


# -- the signal: a page filled in by its scripts ------------------------------------------------


@pytest.mark.parametrize(
    ("html", "evidence"),
    [
        (pages.js_price_page(1, PRICE), "price slot"),
        (pages.js_product_page(1, PRICE, 0), "price slot"),
        ('<body><div id="root"></div><script src="/app.js"></script></body>', "mount point"),
        (
            "<body><p>" + "words " * 60 + "</p><noscript>Please enable JavaScript to continue"
            "</noscript><script>start()</script></body>",
            "noscript",
        ),
        (
            "<body><p>"
            + "words " * 60
            + '</p><script id="__NEXT_DATA__" type="application/json">{}'
            "</script><script>hydrate()</script></body>",
            "state",
        ),
        ("<body><p>Hello</p><script>render()</script></body>", "no text"),
    ],
    ids=["js-price", "js-product", "app-root", "noscript", "app-state", "shell"],
)
def test_pages_rendered_by_scripts_are_told_apart(html: str, evidence: str) -> None:
    found = needs_scripts(html)
    assert found is not None and evidence in found


@pytest.mark.parametrize(
    "html",
    [
        pages.product_page(1, PRICE, True, "http://shop.test"),  # the price is served
        pages.article_page(1),  # an article: text, no price slot
        pages.CAPTCHA_PAGE,
        # A shell, but nothing runs that could fill it: JSON-LD is data, not a script.
        '<body><div id="root"></div><script type="application/ld+json">{}</script></body>',
    ],
    ids=["product", "article", "captcha", "no-runnable-script"],
)
def test_pages_a_browser_would_not_change_are_not(html: str) -> None:
    assert needs_scripts(html) is None


def test_robots_txt_and_images_of_an_auto_domain_use_the_remembered_fetcher() -> None:
    assert for_files("auto", None) == "http"
    assert for_files("auto", "impersonate") == "impersonate"
    assert for_files("auto", "browser") == "impersonate"  # no browser for files
    assert (for_files("browser", None), for_files("http", "browser")) == ("impersonate", "http")


# -- the memory, shared by every process ------------------------------------------------------


async def _auto_domain(db: Database, settings: Settings, host: str, base_url: str) -> int:
    values = {"base_url": base_url, "fetcher": "auto", "ignore_robots": True}
    domain = await admin.create(db, settings, host, {**values, "crawl_delay_seconds": 0})
    return domain.id


async def _events(db: Database, domain_id: int) -> list[Event]:
    async with db.reader() as session:
        rows = await session.scalars(
            select(Event)
            .where(Event.entity_type == "domain", Event.entity_id == str(domain_id))
            .where(Event.event.like("fetcher_%"))
            .order_by(Event.id)
        )
        return list(rows)


async def _domain(db: Database, domain_id: int) -> Domain:
    async with db.reader() as session:
        found = await session.get(Domain, domain_id)
        assert found is not None
        return found


async def test_concurrent_changes_and_probes_are_compare_and_sets(
    db: Database, settings: Settings
) -> None:
    domain_id = await _auto_domain(db, settings, "shop.test", "https://shop.test")
    known = await memory.remembered(db, domain_id)
    assert known == memory.Memory("http", None)

    async def move(to: str) -> bool:
        return await memory.remember(
            db, domain_id, "http", to, "http: blocked", url="u", probe=False, interval=60
        )

    moved = await asyncio.gather(move("impersonate"), move("browser"))
    assert sorted(moved) == [False, True]  # both read "http"; one move won
    after = await memory.remembered(db, domain_id)
    assert after.rung == ("impersonate" if moved[0] else "browser")
    assert after.probe_at is not None and after.probe_at > utcnow()
    [event] = await _events(db, domain_id)
    assert event.event == "fetcher_escalated" and event.details["to"] == after.rung
    # Not due yet: nobody probes. Due: exactly one of two callers does.
    assert not await memory.claim_probe(db, domain_id, after, 60)
    async with db.session() as session:
        await session.execute(
            update(Domain)
            .where(Domain.id == domain_id)
            .values(auto_fetcher_probe_at=utcnow() - timedelta(seconds=1))
        )
    due = await memory.remembered(db, domain_id)
    assert due.probe_due(utcnow())
    won = await asyncio.gather(*(memory.claim_probe(db, domain_id, due, 60) for _ in range(2)))
    assert sorted(won) == [False, True]
    # An operator's pin ends it: nothing more is remembered, and what was is forgotten.
    await admin.update(db, domain_id, {"fetcher": "browser"})
    assert not await memory.remember(
        db, domain_id, "http", "impersonate", "x", url="u", probe=False, interval=60
    )
    pinned = await _domain(db, domain_id)
    assert (pinned.fetcher, pinned.auto_fetcher, pinned.auto_fetcher_probe_at) == (
        "browser",
        None,
        None,
    )


class _Pages:
    """A fetcher and a parse for the climb alone: every fetcher answers, and the parse says
    the page looks rendered by scripts (below the browser) and has no product either way."""

    def __init__(self) -> None:
        self.fetched: list[str] = []

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        self.fetched.append(request.fetcher)
        return FetchResponse(request.url, 200, {}, b"<html></html>", 1)

    async def aclose(self) -> None:
        return None

    async def parse(self, task: Any, response: FetchResponse, *, script_check: bool) -> Parsed:
        return Parsed(scripted="a price slot with no amount" if script_check else None)


async def test_a_climb_for_scripts_is_remembered_only_when_the_browser_finds_the_product(
    db: Database, settings: Settings
) -> None:
    domain_id = await _auto_domain(db, settings, "shop.test", "https://shop.test")
    pages = _Pages()
    climb = Escalation(db, settings, pages, pages.parse)
    task = ClaimedTask(
        id=1, url="https://shop.test/p/1", url_hash="h", status="crawling",
        domain_id=domain_id, domain_name="shop.test", parser_name="generic", user_agent="ua",
        crawl_delay_seconds=0, retry_count=0, max_retries=3, html_path=None,
        is_recurring=False, crawl_frequency_seconds=86400, fetcher="auto",
    )  # fmt: skip
    _, parsed = await climb.climb(task, FetchRequest(task.url, "ua", fetcher="auto"))
    assert pages.fetched == ["http", "browser"]  # it climbed, in the same try
    assert parsed.record is None  # the browser's page: no product there either
    assert (await memory.remembered(db, domain_id)).rung == "http"  # so nothing is remembered
    assert await _events(db, domain_id) == []


# -- the climb, on real servers ---------------------------------------------------------------


@contextlib.asynccontextmanager
async def _pool(db: Database, settings: Settings) -> AsyncIterator[Callable[[str], Awaitable[int]]]:
    """One worker pool (one task at a time) for the whole test; ``crawled(url)`` submits a
    page, waits for it to complete and returns its task id."""
    pool = WorkerPool(db, settings, concurrency=1)
    runner = asyncio.create_task(pool.run())

    async def crawled(url: str) -> int:
        [task_id] = await submit(db, settings, url)
        async with asyncio.timeout(30):
            while (task := (await tasks_by_id(db, [task_id]))[task_id]).status not in TERMINAL:
                assert not runner.done(), "the worker pool stopped"
                await asyncio.sleep(0.05)
        assert task.status == "completed", task.error_message
        return task_id

    try:
        yield crawled
    finally:
        pool.stop()
        await runner


async def _products(db: Database, ids: list[int]) -> dict[int, Product]:
    async with db.reader() as session:
        rows = await session.scalars(select(Product).where(Product.crawl_task_id.in_(ids)))
        return {p.crawl_task_id: p for p in rows}


async def test_a_fingerprint_block_moves_to_impersonate_and_the_probe_comes_back(
    db: Database, make_settings: SettingsFactory, site: TestSite, tmp_path: Path
) -> None:
    ca_file, cert_file, key_file = make_certificates(tmp_path)
    settings = make_settings(ca_bundle_file=ca_file, fetcher_probe_seconds=3600)
    with FingerprintGate(site.port, cert_file, key_file) as gate:
        base = f"https://127.0.0.1:{gate.port}"
        domain_id = await _auto_domain(db, settings, "127.0.0.1", base)

        async with _pool(db, settings) as crawled:
            # http is refused (a 403 block page); impersonate is let through, in the same try.
            first = await crawled(f"{base}/product/41")
            assert (await _products(db, [first]))[first].price is not None
            assert gate.seen == ["other", "chrome"]  # http's hello, then impersonate's
            domain = await _domain(db, domain_id)
            assert domain.auto_fetcher == "impersonate"
            assert domain.auto_fetcher_reason is not None
            assert domain.auto_fetcher_reason.startswith("http: status 403")
            assert "blocked" in domain.auto_fetcher_reason
            [escalated] = await _events(db, domain_id)
            assert escalated.event == "fetcher_escalated"
            assert (escalated.details["from"], escalated.details["to"]) == ("http", "impersonate")

            # Remembered: the next page goes straight to impersonate.
            await crawled(f"{base}/product/42")
            assert _others(gate) == 1  # no http hello (impersonate may reuse its connection)

            # The probe is due and the site still refuses http: the memory stays, the probe
            # moves on.
            await _probe_due(db, domain_id)
            await crawled(f"{base}/product/43")
            assert _others(gate) == 2
            kept = await _domain(db, domain_id)
            assert kept.auto_fetcher == "impersonate"
            assert kept.auto_fetcher_probe_at is not None
            assert kept.auto_fetcher_probe_at > utcnow()
            assert (await _events(db, domain_id))[-1].event == "fetcher_probed"

            # The site stops checking; the next due probe finds http works and moves back down.
            gate.everyone = True
            await _probe_due(db, domain_id)
            await crawled(f"{base}/product/44")
            assert _others(gate) == 3
        # Each page reached the site once: the refused requests never did.
        served = [r.path for r in site.requests() if r.path.startswith("/product/")]
        assert served == [f"/product/{n}" for n in (41, 42, 43, 44)]
    lowered = await _domain(db, domain_id)
    assert (lowered.auto_fetcher, lowered.auto_fetcher_probe_at) == ("http", None)
    events = await _events(db, domain_id)
    assert [e.event for e in events] == ["fetcher_escalated", "fetcher_probed", "fetcher_lowered"]
    assert events[-1].details["probe"] is True


def _others(gate: FingerprintGate) -> int:
    """TLS hellos that were not Chrome's: the http fetcher's tries (the refuser closes each
    connection, so every try is a new hello)."""
    return gate.seen.count("other")


async def _probe_due(db: Database, domain_id: int) -> None:
    async with db.session() as session:
        await session.execute(
            update(Domain)
            .where(Domain.id == domain_id)
            .values(auto_fetcher_probe_at=utcnow() - timedelta(seconds=1))
        )


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_price_shown_only_by_javascript_is_found_by_auto(
    api: httpx.AsyncClient, make_settings: SettingsFactory, site: TestSite
) -> None:
    require("browser")
    host = "127.0.0.5"
    base = site.url("/", host=host).rstrip("/")
    created = await api.post(
        "/api/domains",
        json={"domain_name": host, "base_url": base, "fetcher": "auto", "ignore_robots": True,
              "crawl_delay_seconds": 0},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    assert created.json()["auto_fetcher"] is None
    runtime = api.app.state.runtime  # type: ignore[attr-defined]
    settings = make_settings()
    # One task at a time: the second page is fetched once the first has taught the domain.
    urls = [site.url(f"/js-price/{n}", host=host) for n in (51, 52)]
    ids = await submit(runtime.db, settings, *urls)
    tasks = await crawl(runtime.db, settings, ids, concurrency=1)
    assert all(t.status == "completed" for t in tasks.values()), tasks
    prices = {site.state.price(n)[0] for n in (51, 52)}
    assert {p.price for p in (await _products(runtime.db, ids)).values()} == prices
    shown = (await api.get(f"/api/domains/{created.json()['id']}")).json()
    assert shown["fetcher"] == "auto" and shown["auto_fetcher"] == "browser"
    assert shown["auto_fetcher_reason"].startswith("http: a price slot with no amount")
    assert shown["auto_fetcher_probe_at"] is not None
    # Remembered: the second page is fetched by the browser alone (one request, not two).
    fetched = [r.path for r in site.requests() if r.path.startswith("/js-price/")]
    assert fetched == ["/js-price/51", "/js-price/51", "/js-price/52"]
    events = (await api.get("/api/events", params={"entity_type": "domain"})).json()
    assert any(e["event"] == "fetcher_escalated" for e in events["items"])
