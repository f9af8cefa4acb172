"""Sitemaps (issue 32): read safely — no entity expansion, no external entity, malformed XML a
clear error, the protocol's limits held (lowered here so the test stays small) — and a crawl
job reading its start host's robots.txt ``Sitemap:`` lines (a sitemap index with a gzipped child
and a broken one) finds every product once, and its re-run recrawls only what changed."""

from __future__ import annotations

import gzip
from datetime import timedelta

import pytest
from sqlalchemy import select

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlJob, CrawlTask, Event
from forager.db.types import utcnow
from forager.discovery import admin
from forager.discovery.jobs import JobSpec, start
from forager.discovery.sitemaps import MAX_BYTES, MAX_ENTRIES, SitemapError, read_sitemap
from forager.queue.lifecycle import TaskStatus
from tests.support import shop
from tests.support.site import TestSite
from tests.test_discovery import run_job

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
LAUGHS = f"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol">
<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">]>
<urlset {NS}><url><loc>http://shop.test/&lol4;</loc></url></urlset>""".encode()


def _urlset(n: int) -> bytes:
    urls = "".join(f"<url><loc>http://shop.test/p/{i}</loc></url>" for i in range(n))
    return f"<urlset {NS}>{urls}</urlset>".encode()


def test_entity_expansion_is_refused() -> None:
    with pytest.raises(SitemapError, match="declares a DTD"):
        read_sitemap(LAUGHS)


def test_external_entities_are_refused() -> None:
    secret = "/etc/hostname"
    xxe = f"""<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file://{secret}">]>
<urlset {NS}><url><loc>http://shop.test/&x;</loc></url></urlset>""".encode()
    with pytest.raises(SitemapError, match="declares a DTD"):
        read_sitemap(xxe)


def test_malformed_xml_is_a_clear_error() -> None:
    with pytest.raises(SitemapError, match=r"malformed XML.*line 1"):
        read_sitemap(f"<urlset {NS}><url><loc>".encode())


def test_gzipped_sitemaps_and_lastmod_are_read() -> None:
    body = f"<urlset {NS}><url><loc> http://shop.test/p/1 </loc><lastmod>2026-11-02</lastmod>"
    body += "</url><url><loc>http://shop.test/p/2</loc></url></urlset>"
    found = read_sitemap(gzip.compress(body.encode()))
    assert found.kind == "urlset"
    assert found.entries == (("http://shop.test/p/1", "2026-11-02"), ("http://shop.test/p/2", None))


def test_the_protocol_limits_hold() -> None:
    assert (MAX_ENTRIES, MAX_BYTES) == (50_000, 50 * 1024 * 1024)  # the protocol's
    assert len(read_sitemap(_urlset(10), max_entries=10).entries) == 10
    with pytest.raises(SitemapError, match="over 10 entries"):
        read_sitemap(_urlset(11), max_entries=10)
    bomb = gzip.compress(b" " * (2 * 1024 * 1024))  # 2 MB of blanks in a few kB
    with pytest.raises(SitemapError, match="over 1 MB uncompressed"):
        read_sitemap(bomb, max_bytes=1024 * 1024)


def _robots_with_sitemaps(site: TestSite) -> None:
    site.set_robots(
        "User-agent: *\nDisallow: /shop/*?sid=\n"
        f"Sitemap: {site.url('/shop/sitemap.xml')}\n"
        "Sitemap: http://elsewhere.test/sitemap.xml\n"
    )


async def test_a_job_from_robots_sitemaps_finds_every_product_once_and_reruns_what_changed(
    db: Database, settings: Settings, site: TestSite
) -> None:
    # The home page links no product (but the nofollow and off-scope ones) and no rule follows
    # its categories: the products are reached through robots.txt's sitemap index alone.
    _robots_with_sitemaps(site)
    spec = JobSpec(
        name="shop sitemap",
        start_urls=(site.url("/shop/"),),
        robots_sitemaps=True,
        rules=({"pattern": "/shop/p/\\d+$", "action": "parse"},),
    )
    job = await start(db, settings, spec)
    progress = await run_job(db, settings, job.id)
    async with db.reader() as session:
        tasks = list(await session.scalars(select(CrawlTask).where(CrawlTask.job_id == job.id)))
    products = sorted(int(t.url.rsplit("/", 1)[1]) for t in tasks if t.job_action == "parse")
    assert products == sorted(shop.products())
    assert not [t.url for t in tasks if "127.0.0.2" in t.url or "elsewhere" in t.url]
    sitemaps = sorted(t.url.rsplit("/", 1)[1] for t in tasks if t.job_action == "sitemap")
    assert sitemaps == [
        "sitemap-broken.xml",
        "sitemap-kettles.xml.gz",
        "sitemap-more.xml",
        "sitemap.xml",
    ]
    broken = [t for t in tasks if t.url.endswith("sitemap-broken.xml")]
    assert len(broken) == 1
    assert broken[0].status == TaskStatus.FAILED
    assert "malformed XML" in (broken[0].error_message or "")
    assert progress.errors == 1
    assert progress.products == len(shop.products())
    fetched = [r["path"] for r in site.log()["requests"] if r["path"].startswith("/shop/p/")]
    assert sorted(fetched) == sorted(f"/shop/p/{n}" for n in shop.products())

    # Two products' lastmod moves on: a re-run fetches the entry points again and those two.
    site.reset()
    _robots_with_sitemaps(site)
    shop.CHANGED.update({101, 305})
    try:
        again = await admin.rerun(db, settings, job.id)
        assert again.status == "running"
        await run_job(db, settings, job.id)
    finally:
        shop.CHANGED.clear()
    fetched = sorted(r["path"] for r in site.log()["requests"] if r["path"].startswith("/shop/"))
    assert fetched == [
        "/shop/",
        "/shop/p/101",
        "/shop/p/305",
        "/shop/sitemap-broken.xml",
        "/shop/sitemap-kettles.xml.gz",
        "/shop/sitemap-more.xml",
        "/shop/sitemap.xml",
    ]
    async with db.reader() as session:
        row = await session.get(CrawlJob, job.id)
    assert row is not None
    assert (row.status, row.pages_queued) == ("done", 7)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # no dialect-specific SQL here
async def test_a_scheduled_job_runs_again_when_due_and_recrawls_only_what_changed(
    db: Database, settings: Settings, site: TestSite
) -> None:
    spec = JobSpec(
        name="nightly",
        sitemap_urls=(site.url("/shop/sitemap-more.xml"),),
        rules=({"pattern": "/shop/p/\\d+$", "action": "parse"},),
        rerun_every_seconds=3600,
    )
    job = await start(db, settings, spec)
    assert job.next_run_at == job.started_at + timedelta(hours=1)
    await run_job(db, settings, job.id)
    assert await admin.rerun_due(db, settings, utcnow()) == []  # not due yet

    site.reset()
    shop.CHANGED.add(305)
    try:
        due = job.started_at + timedelta(hours=1, seconds=1)
        assert await admin.rerun_due(db, settings, due) == [job.id]
        assert await admin.rerun_due(db, settings, due) == []  # one run per due time
        await run_job(db, settings, job.id)
    finally:
        shop.CHANGED.clear()
    fetched = sorted(r["path"] for r in site.log()["requests"] if r["path"].startswith("/shop/"))
    assert fetched == ["/shop/p/305", "/shop/sitemap-more.xml"]
    async with db.reader() as session:
        row = await session.get(CrawlJob, job.id)
    assert row is not None and row.next_run_at is not None
    assert row.next_run_at == row.started_at + timedelta(hours=1) > due - timedelta(seconds=1)
    async with db.reader() as session:
        events = list(
            await session.scalars(
                select(Event.event).where(
                    Event.entity_type == "crawl_job", Event.entity_id == str(job.id)
                )
            )
        )
    assert events.count("rerun") == 1


async def test_a_run_still_going_is_not_started_again(
    db: Database, settings: Settings, site: TestSite
) -> None:
    spec = JobSpec(
        name="slow",
        start_urls=(site.url("/shop/"),),
        rules=({"pattern": "/shop/c/", "action": "follow"},),
        rerun_every_seconds=60,
    )
    job = await start(db, settings, spec)  # its start page waits: no worker runs here
    later = job.started_at + timedelta(minutes=5)
    assert await admin.rerun_due(db, settings, later) == []
    await admin.act(db, job.id, "pause")
    assert await admin.rerun_due(db, settings, later) == []  # nor a paused one
