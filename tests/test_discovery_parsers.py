"""Links from parsers (issue 32): a selector map's ``links`` rule and a parser plugin's
``Extracted.links`` go through a crawl job's scope, trap limits, rules and budgets exactly as the
links the job reads from a page itself; and a parse rule's own recrawl schedule."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from selectolax.lexbor import LexborHTMLParser
from sqlalchemy import update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlTask, Domain
from forager.discovery.jobs import JobSpec, start
from forager.discovery.links import given_links
from forager.discovery.rules import LinkPolicy, Rule
from forager.domains import selectors
from forager.errors import InvalidRequest, NotProductPage
from forager.parse import registry
from forager.parse.base import Extracted, ProductRecord
from forager.parse.selectors import compile_map
from forager.queue.lifecycle import TaskStatus
from forager.queue.urls import Link, normalize_url
from tests.support import shop
from tests.support.site import TestSite
from tests.test_discovery import job_tasks, run_job

PAGE = "https://shop.test/c/kettles"


class LinkingParser:
    """A plugin that gives links: on a listing, its grid's products (no product of its own);
    on a product page, the product and a link to the shop's nofollow product."""

    name = "test-linking"
    version = "1"
    gives_links = True

    def parse(self, html: str, url: str) -> Extracted:
        tree = LexborHTMLParser(html)
        grid = [a.attributes.get("href") or "" for a in tree.css("main.grid a.item")]
        if grid:
            return Extracted(links=grid)
        title = tree.css_first("h1")
        if title is None:
            raise NotProductPage(f"{url}: no product")
        product = ProductRecord(url=url, product_name=title.text(strip=True))
        return Extracted(product, links=[f"/shop/p/{shop.NOFOLLOW_PRODUCT}"])


# Registered on import: here, and in each parse process (``parser_modules``).
registry.register(LinkingParser())


@pytest.fixture
def settings(make_settings: Any) -> Settings:
    settings: Settings = make_settings(parser_modules=["tests.test_discovery_parsers"])
    return settings


def test_given_links_go_by_scope_traps_and_rules_but_not_regions() -> None:
    policy = LinkPolicy(
        1,
        "host",
        ("shop.test",),
        (Rule("/p/sale", "ignore"), Rule("/p/", "parse", region="main.grid")),
        False,
        1,
        100,
    )
    known = (Link(normalize_url("https://shop.test/p/1"), "parse"),)
    hrefs = [
        "/p/1",  # the page's own link: dropped, not counted twice
        "/p/2",  # the rule's region is not asked: the parser chose it
        "../p/3",
        "/p/2#again",
        "https://elsewhere.test/p/4",  # out of scope
        "/p/5?a=1&b=2",  # over the query-parameter limit
        "/p/sale",  # ignored by rule
        "/about",  # no rule
        "http://[bad",  # not a URL
    ]
    links, refused = given_links(hrefs, PAGE, policy, known)
    assert [(link.where.url, link.action) for link in links] == [
        ("https://shop.test/p/2", "parse"),
        ("https://shop.test/p/3", "parse"),
    ]
    assert refused == 5


def test_a_selector_map_may_read_links() -> None:
    fields = {"product_name": {"css": "h1"}, "links": {"css": "a.item", "attr": "href"}}
    page = '<h1>Kettle</h1><a class="item" href="/p/1">1</a><a class="item" href="/p/2">2</a>'
    selector_map = compile_map(fields)
    assert selector_map.links_of(page) == ["/p/1", "/p/2"]
    parsed = selector_map.parse(page, PAGE)
    assert isinstance(parsed, Extracted)
    assert parsed.product is not None and parsed.product.product_name == "Kettle"
    assert parsed.links == ["/p/1", "/p/2"]
    with pytest.raises(InvalidRequest) as refused:
        compile_map({"product_name": {"css": "h1"}, "links": {"css": "a[["}})
    assert refused.value.field == "fields.links.css"
    assert compile_map({"product_name": {"css": "h1"}}).links_of(page) == []


def _kettles_job(site: TestSite, **overrides: Any) -> JobSpec:
    """The kettles listing, whose product links the job's own rules never take (their region
    is nowhere on the page): every product must come from the parser's links."""
    values: dict[str, Any] = {
        "name": "kettles",
        "start_urls": (site.url("/shop/c/kettles"),),
        "rules": (
            {"pattern": "/shop/c/kettles(\\?page=\\d+)?$", "action": "follow"},
            {"pattern": "/shop/p/\\d+$", "action": "parse", "region": "div.nowhere"},
        ),
        "max_query_params": 1,
    }
    values.update(overrides)
    return JobSpec(**values)


async def _parse_tasks(db: Database, job_id: int) -> list[CrawlTask]:
    return [t for t in await job_tasks(db, job_id) if t.job_action == "parse"]


def _numbers(tasks: list[CrawlTask]) -> list[int]:
    return sorted(int(t.url.rsplit("/", 1)[1]) for t in tasks)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # no dialect-specific SQL here
async def test_a_selector_maps_links_feed_the_job(
    db: Database, settings: Settings, site: TestSite
) -> None:
    rules = (
        {"pattern": "/shop/c/kettles(\\?page=\\d+)?$", "action": "follow"},
        {"pattern": "/shop/p/\\d+$", "action": "parse", "region": "div.x", "recrawl_seconds": 3600},
    )
    job = await start(db, settings, _kettles_job(site, rules=rules))
    [listing] = await job_tasks(db, job.id)
    fields = {"product_name": {"css": "h1"}, "links": {"css": "main.grid a.item", "attr": "href"}}
    await selectors.save(db, listing.domain_id, fields, None, use=True, by="test")
    await run_job(db, settings, job.id)
    products = await _parse_tasks(db, job.id)
    kettles = [n for n in shop.products() if n // 100 == shop.CATEGORIES["kettles"]]
    assert _numbers(products) == kettles  # each once, none from the "also viewed" aside
    assert all(t.status == TaskStatus.COMPLETED and t.depth and t.depth > 0 for t in products)
    listings = {t.id for t in await job_tasks(db, job.id) if t.job_action == "follow"}
    assert {t.found_on_task_id for t in products} <= listings
    # The parse rule's own recrawl schedule: its pages recur hourly, the listings do not.
    for t in products:
        assert (t.is_recurring, t.crawl_frequency_seconds) == (True, 3600)
        assert t.next_crawl_at == t.completed_at + timedelta(hours=1)  # type: ignore[operator]
    assert not any(t.is_recurring for t in await job_tasks(db, job.id) if t.id in listings)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # no dialect-specific SQL here
async def test_a_plugins_links_feed_the_job_from_listings_and_product_pages(
    db: Database, settings: Settings, site: TestSite
) -> None:
    job = await start(db, settings, _kettles_job(site))
    [listing] = await job_tasks(db, job.id)
    async with db.session() as session:
        await session.execute(
            update(Domain).where(Domain.id == listing.domain_id).values(parser_name="test-linking")
        )
    await run_job(db, settings, job.id)
    tasks = await job_tasks(db, job.id)
    products = await _parse_tasks(db, job.id)
    kettles = [n for n in shop.products() if n // 100 == shop.CATEGORIES["kettles"]]
    assert _numbers(products) == sorted([*kettles, shop.NOFOLLOW_PRODUCT])  # each once
    assert len(tasks) == len(products) + 4  # and the listing: pages 1 to 3, and ?page=1
    # The nofollow product came from a product page's parser (one level below it).
    by_id = {t.id: t for t in tasks}
    [nofollow] = [t for t in products if t.url.endswith(f"/shop/p/{shop.NOFOLLOW_PRODUCT}")]
    found_on = by_id[nofollow.found_on_task_id or 0]
    assert found_on.job_action == "parse" and nofollow.depth == (found_on.depth or 0) + 1
    assert all(t.status == TaskStatus.COMPLETED for t in tasks)
