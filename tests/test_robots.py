"""robots.txt per RFC 9309: the RFC's examples and the forms large shops rely on, read as the
crawl reads them; 4xx and unreachable files; and crawls through a real robots.txt on the test
site, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from datetime import datetime, timedelta

import httpx
import pytest
from sqlalchemy import select, update

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import CrawlTask, Domain
from forager.db.types import utcnow
from forager.domains import robots
from forager.domains.robots import RobotsRules, Verdict
from forager.fetch.fetcher_set import FetcherSet
from forager.worker.pool import WorkerPool
from tests.conftest import SettingsFactory
from tests.support.crawling import crawl, submit
from tests.support.site import TestSite
from tests.support.waiting import entity_events, eventually, task_attempts

AGENT = "Forager/0.1 (self-hosted crawler)"

# The forms of the issue (Amazon's robots.txt and most large shops' use them).
SHOP = """User-agent: *
Disallow: /*/product-reviews/
Disallow: /*.pdf$
Disallow: /gp/cart
Allow: /gp/cart/view
"""

# RFC 9309, 5.1 "Simple Example".
RFC_5_1 = """User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
"""

# RFC 9309, 5.2 "Longest Match".
RFC_5_2 = """User-Agent: foobot
Allow: /example/page/
Disallow: /example/page/disallowed.gif
"""

# RFC 9309, 2.2.1: groups naming the same agent are merged; its own group replaces "*".
MERGED = """user-agent: ExampleBot
disallow: /foo
disallow: /bar

user-agent: *
disallow: /everything-else

user-agent: examplebot
disallow: /baz
"""

RULES = [
    # The three forms: "*" and "$" are patterns, the longest match wins.
    (SHOP, AGENT, "/x/product-reviews/B01", False),
    (SHOP, AGENT, "/a/b/product-reviews/", False),
    (SHOP, AGENT, "/product-reviews/B01", True),  # "/*/" needs a segment before it
    (SHOP, AGENT, "/doc.pdf", False),
    (SHOP, AGENT, "/files/doc.pdf", False),
    (SHOP, AGENT, "/doc.pdf?download=1", True),  # "$": the URL must end there
    (SHOP, AGENT, "/doc.pdfx", True),
    (SHOP, AGENT, "/gp/cart/view", True),  # Allow is longer than Disallow: /gp/cart
    (SHOP, AGENT, "/gp/cart/view/123", True),
    (SHOP, AGENT, "/gp/cart", False),
    (SHOP, AGENT, "/gp/cart/add", False),
    (SHOP, AGENT, "/dp/B01", True),
    # RFC 9309 5.1: an agent without a group of its own follows "*".
    (RFC_5_1, "otherbot/2.0", "/images/a.gif", False),  # "*" matches "/" too
    (RFC_5_1, "otherbot/2.0", "/example/", False),
    (RFC_5_1, "otherbot/2.0", "/example/page.html", False),
    (RFC_5_1, "otherbot/2.0", "/publications/", True),
    (RFC_5_1, "otherbot/2.0", "/publications/a.gif", True),  # the longer rule is the Allow
    (RFC_5_1, "otherbot/2.0", "/elsewhere", True),
    # foobot: everything disallowed but two paths; its group replaces "*".
    (RFC_5_1, "foobot/1.0", "/", False),
    (RFC_5_1, "foobot/1.0", "/publications/", False),
    (RFC_5_1, "foobot/1.0", "/example/page.html", True),
    (RFC_5_1, "foobot/1.0", "/example/allowed.gif", True),
    (RFC_5_1, "foobot/1.0", "/example/other.gif", False),
    # barbot and bazbot share one group; "*"'s *.gif$ is not theirs.
    (RFC_5_1, "barbot", "/example/page.html", False),
    (RFC_5_1, "bazbot", "/example/page.html", False),
    (RFC_5_1, "bazbot", "/example/other.html", True),
    (RFC_5_1, "barbot", "/images/a.gif", True),
    # quxbot: an empty group at the end of the file; everything allowed.
    (RFC_5_1, "quxbot", "/example/page.html", True),
    (RFC_5_1, "quxbot", "/images/a.gif", True),
    # The product token is matched case-insensitively.
    (RFC_5_1, "FooBot/1.0 (+https://foo.example/bot)", "/publications/", False),
    (RFC_5_1, "FOOBOT", "/example/page.html", True),
    # RFC 9309 5.2: the most specific (longest) match wins, whatever the order.
    (RFC_5_2, "foobot", "/example/page/", True),
    (RFC_5_2, "foobot", "/example/page/allowed.html", True),
    (RFC_5_2, "foobot", "/example/page/disallowed.gif", False),
    # RFC 9309 2.2.1: merged groups, and a specific group instead of "*".
    (MERGED, "ExampleBot/1.1", "/foo", False),
    (MERGED, "ExampleBot/1.1", "/baz", False),
    (MERGED, "ExampleBot/1.1", "/everything-else", True),
    (MERGED, "OtherBot/1.1", "/everything-else", False),
    (MERGED, "OtherBot/1.1", "/foo", True),
    # RFC 9309 2.2.2: an Allow as long as a Disallow wins; no matching group allows all.
    ("User-agent: *\nDisallow: /page\nAllow: /page\n", AGENT, "/page", True),
    ("User-agent: somebot\nDisallow: /\n", AGENT, "/anything", True),
    ("User-agent: *\nDisallow: /\n", AGENT, "/robots.txt", True),  # implicitly allowed
    # RFC 9309 2.2.2: paths compare with percent-encoding normalized.
    ("User-agent: *\nDisallow: /foo/bar/%62%61%7A\n", AGENT, "/foo/bar/baz", False),
    ("User-agent: *\nDisallow: /foo/bar/\u30c4\n", AGENT, "/foo/bar/%E3%83%84", False),
    ("User-agent: *\nDisallow: /foo/bar?baz=quz\n", AGENT, "/foo/bar?baz=quz", False),
]


@pytest.mark.parametrize(
    ("text", "agent", "path", "allowed"),
    RULES,
    ids=[f"{n}:{a}:{p}" for n, (_, a, p, _) in enumerate(RULES)],
)
def test_rules_follow_rfc9309(text: str, agent: str, path: str, allowed: bool) -> None:
    assert robots.allows(robots.parse(text), f"https://shop.example{path}", agent) is allowed


@pytest.mark.parametrize(
    ("text", "agent", "delay"),
    [
        ("User-agent: *\nCrawl-delay: 0.5\n", AGENT, 0.5),  # fractional (the stdlib drops it)
        ("User-agent: *\nCrawl-delay: 5\n\nUser-agent: forager\nCrawl-delay: 0.25\n", AGENT, 0.25),
        ("User-agent: *\nCrawl-delay: 5\n\nUser-agent: forager\nCrawl-delay: 0.25\n", "X/1", 5.0),
        ("User-agent: *\nCrawl-delay: soon\n", AGENT, None),
        ("User-agent: *\nCrawl-delay: -1\n", AGENT, None),
        ("User-agent: *\nCrawl-delay: 86400\n", AGENT, robots.MAX_CRAWL_DELAY_SECONDS),
        ("User-agent: *\nDisallow: /x\n", AGENT, None),
    ],
)
def test_crawl_delay_is_the_agents_groups(text: str, agent: str, delay: float | None) -> None:
    assert robots.crawl_delay(robots.parse(text), agent) == delay


def test_sitemap_lines_are_kept_whichever_group_they_stand_in() -> None:
    text = (
        "Sitemap: https://shop.example/sitemap-a.xml\n"
        "User-agent: *\nDisallow: /cart\nSitemap: https://shop.example/sitemap-b.xml\n"
        "Sitemap: /relative.xml\nSitemap: https://shop.example/sitemap-a.xml\n"
    )
    assert robots.sitemaps(robots.parse(text)) == [
        "https://shop.example/sitemap-a.xml",
        "https://shop.example/sitemap-b.xml",
    ]


# -- through the database, the fetcher and the worker pool -------------------------------


async def test_a_crawl_follows_the_longest_match_and_keeps_the_sitemaps(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_retries=0)
    base = site.url("/").rstrip("/")
    site.set_robots(f"{SHOP}\nSitemap: {base}/sitemap-1.xml\nSitemap: {base}/sitemap-2.xml\n")
    paths = ["/x/product-reviews/B01", "/doc.pdf", "/gp/cart/add", "/gp/cart/view", "/product/1"]
    ids = dict(zip(paths, await submit(db, settings, *[site.url(p) for p in paths]), strict=True))
    tasks = await crawl(db, settings, list(ids.values()))

    requested = [r.path for r in site.requests()]
    for path in ("/x/product-reviews/B01", "/doc.pdf", "/gp/cart/add"):
        task = tasks[ids[path]]
        assert (task.status, task.error_type) == ("failed", "robots_denied"), path
        assert path not in requested  # refused without a request
    # Allowed by the longer Allow: really requested (the test site has no such page: 404).
    assert (tasks[ids["/gp/cart/view"]].error_type, "/gp/cart/view" in requested) == (
        "http_4xx",
        True,
    )
    assert tasks[ids["/product/1"]].status == "completed"
    async with db.reader() as session:
        domain = await session.scalar(
            select(Domain).where(Domain.id == tasks[ids["/product/1"]].domain_id)
        )
    assert domain is not None
    assert domain.robots_txt_sitemaps == [f"{base}/sitemap-1.xml", f"{base}/sitemap-2.xml"]


async def test_the_domains_api_shows_the_sitemaps(api: httpx.AsyncClient, site: TestSite) -> None:
    base = site.url("/").rstrip("/")
    site.set_robots(f"User-agent: *\nDisallow: /private/\nSitemap: {base}/sitemap.xml\n")
    created = await api.post("/api/domains", json={"domain_name": "127.0.0.1", "base_url": base})
    assert created.status_code == 201, created.text
    domain_id = created.json()["id"]
    assert created.json()["robots_txt_sitemaps"] is None  # not read yet
    refreshed = (await api.post(f"/api/domains/{domain_id}/refresh-robots")).json()
    assert refreshed["robots_txt_sitemaps"] == [f"{base}/sitemap.xml"]
    shown = (await api.get(f"/api/domains/{domain_id}")).json()
    assert shown["robots_txt_sitemaps"] == [f"{base}/sitemap.xml"]

    site.set_robots("User-agent: *\nDisallow: /private/\n")  # read again: no sitemap now
    again = (await api.post(f"/api/domains/{domain_id}/refresh-robots")).json()
    assert again["robots_txt_sitemaps"] == []


async def _domain_of(db: Database, task_id: int) -> int:
    async with db.reader() as session:
        domain_id = await session.scalar(select(CrawlTask.domain_id).where(CrawlTask.id == task_id))
    assert domain_id is not None
    return domain_id


def _robots_requests(site: TestSite) -> int:
    return [r.path for r in site.requests()].count("/robots.txt")


async def test_a_robots_txt_answered_4xx_allows_everything(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    """RFC 9309 2.3.1.3: "unavailable" (4xx) means no rules at all."""
    settings = make_settings()
    site.set_robots("User-agent: *\nDisallow: /\n", status=404)
    [task_id] = await submit(db, settings, site.url("/product/1"))
    domain_id = await _domain_of(db, task_id)
    verdict = await _check_once(db, settings, domain_id, site.url("/product/1"))
    assert (verdict.allowed, verdict.fetched, verdict.retry_in) == (True, True, None)
    async with db.reader() as session:
        domain = await session.scalar(select(Domain).where(Domain.id == domain_id))
    assert domain is not None
    assert (domain.robots_txt_content, domain.robots_txt_sitemaps) == ("", [])


async def test_an_unreachable_robots_txt_allows_nothing_until_it_is_read(
    db: Database, make_settings: SettingsFactory, site: TestSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RFC 9309 2.3.1.4: 5xx or no answer means complete disallow; not fetched again per
    check, but when the retry is due; a cached copy is used meanwhile (RFC 9309 2.4)."""
    settings = make_settings()
    site.set_robots("User-agent: *\nDisallow: /private/\n", status=503)
    [task_id] = await submit(db, settings, site.url("/product/1"))
    domain_id = await _domain_of(db, task_id)
    page, private = site.url("/product/1"), site.url("/private/1")
    fetchers = FetcherSet(settings)
    try:
        rules = RobotsRules(db, settings, fetcher=fetchers, box=SecretBox(settings))
        first = await rules.check(domain_id, page, AGENT)
        assert (first.allowed, first.fetched) == (False, True)
        assert first.retry_in is not None and 0 < first.retry_in <= 60
        assert "unreachable" in (first.reason or "") and "503" in (first.reason or "")
        again = await rules.check(domain_id, page, AGENT)
        assert (again.allowed, again.fetched, again.retry_in is not None) == (False, False, True)
        assert _robots_requests(site) == 1

        # A minute later the fetch is tried again, and the file read applies.
        site.set_robots("User-agent: *\nDisallow: /private/\n")
        _later(monkeypatch, timedelta(seconds=61))
        now = await rules.check(domain_id, page, AGENT)
        assert (now.allowed, now.fetched) == (True, True)
        assert not (await rules.check(domain_id, private, AGENT)).allowed
        assert _robots_requests(site) == 2

        # A day later the site fails again: the cached copy is used, fetched once a minute.
        site.set_robots("User-agent: *\nDisallow: /\n", status=500)
        _later(monkeypatch, timedelta(days=1, minutes=2))
        cached = await rules.check(domain_id, page, AGENT)
        assert (cached.allowed, cached.fetched) == (True, True)
        assert not (await rules.check(domain_id, private, AGENT)).allowed
        assert _robots_requests(site) == 3
    finally:
        await fetchers.aclose()


async def test_a_failure_that_is_not_the_sites_does_not_stop_the_crawl(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    """No proxy for the domain's required country: robots.txt is not read, which says nothing
    of the site; the page's own fetch meets the same refusal and fails with it."""
    settings = make_settings()
    [task_id] = await submit(db, settings, site.url("/product/1"))
    domain_id = await _domain_of(db, task_id)
    async with db.session() as session:
        await session.execute(
            update(Domain).where(Domain.id == domain_id).values(required_country_code="DE")
        )
    verdict = await _check_once(db, settings, domain_id, site.url("/product/1"))
    assert (verdict.allowed, verdict.fetched, verdict.retry_in) == (True, True, None)
    assert _robots_requests(site) == 0


def _later(monkeypatch: pytest.MonkeyPatch, by: timedelta) -> None:
    """The robots module's clock, ``by`` ahead of the real one (no test sleeps that long)."""
    monkeypatch.setattr(robots, "utcnow", lambda: _real_now() + by)


_real_now = utcnow


async def test_a_try_fails_as_robots_txt_did_while_it_is_unreachable(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    """No request for the page while robots.txt answers 503: the try fails ``http_5xx`` and is
    retried no sooner than robots.txt is asked again, with the domain closed meanwhile so its
    other tasks are not claimed only to wait in turn; once robots.txt answers, the retry is
    crawled."""
    settings = make_settings(max_retries=1)
    site.set_robots("User-agent: *\nAllow: /\n", status=503)
    [task_id] = await submit(db, settings, site.url("/product/1"))
    task = await _run_until(db, settings, task_id, lambda t: t.retry_count == 1)
    async with db.reader() as session:
        domain = await session.scalar(select(Domain).where(Domain.id == task.domain_id))
        assert domain is not None
    assert (task.status, task.error_type) == ("pending", "http_5xx")
    assert "robots.txt" in (task.error_message or "") and "unreachable" in task.error_message
    assert _after(task.scheduled_at, seconds=30) and _after(domain.next_fetch_at, seconds=30)
    assert "/product/1" not in [r.path for r in site.requests()]
    assert await task_attempts(db, task_id) == []

    # robots.txt answers again: the retry is crawled once it is due (made due now here).
    site.set_robots("User-agent: *\nAllow: /\n")
    async with db.session() as session:
        await session.execute(update(Domain).values(next_fetch_at=None))
        await session.execute(update(CrawlTask).values(scheduled_at=utcnow()))
    tasks = await crawl(db, settings, [task_id])
    assert tasks[task_id].status == "completed"


async def test_a_dead_sites_tasks_end_failed_not_waiting_for_ever(
    db: Database, make_settings: SettingsFactory
) -> None:
    """Nothing listens: robots.txt is unreachable (``network``) and, with no retry left, the
    task fails saying so instead of being put back every minute for ever."""
    settings = make_settings(max_retries=0)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    [task_id] = await submit(db, settings, f"http://127.0.0.1:{port}/product/1")
    task = await _run_until(db, settings, task_id, lambda t: t.status == "failed")
    assert task.error_type == "network"
    assert "robots.txt" in (task.error_message or "") and "unreachable" in task.error_message


async def _run_until(
    db: Database, settings: Settings, task_id: int, done: Callable[[CrawlTask], bool]
) -> CrawlTask:
    """Run a worker pool until the task's row satisfies ``done``; that row."""
    pool = WorkerPool(db, settings, concurrency=2)
    runner = asyncio.create_task(pool.run())

    async def row() -> CrawlTask | None:
        async with db.reader() as session:
            task = await session.scalar(select(CrawlTask).where(CrawlTask.id == task_id))
        return task if task is not None and done(task) else None

    try:
        found: CrawlTask = await eventually(row, "the task's try to end")
    finally:
        pool.stop()
        await runner
    return found


async def _check_once(db: Database, settings: Settings, domain_id: int, url: str) -> Verdict:
    """One robots.txt check of ``url`` with fetchers of its own (closed afterwards)."""
    fetchers = FetcherSet(settings)
    try:
        rules = RobotsRules(db, settings, fetcher=fetchers, box=SecretBox(settings))
        return await rules.check(domain_id, url, AGENT)
    finally:
        await fetchers.aclose()


async def _has_event(db: Database, task_id: int, name: str) -> bool:
    return name in await entity_events(db, "task", task_id)


def _after(moment: datetime | None, *, seconds: float) -> bool:
    """``moment`` is at least ``seconds`` from now (a wait, not a timing measurement)."""
    return moment is not None and moment > utcnow() + timedelta(seconds=seconds)
