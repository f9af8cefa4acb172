"""Issue 33: the request profile everywhere a domain is fetched. robots.txt and product images
go out with the domain's headers, cookies and user agent as its pages do (a shop that answers
them only to a shopper), against the test site's shopper gate on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from sqlalchemy import select, update

from forager.crypto import SecretBox
from forager.db.models import Domain, ProductImage
from forager.domains.profile import seal
from forager.runtime import open_database
from forager.worker.pool import WorkerPool
from tests.conftest import SettingsFactory
from tests.support.crawling import submit
from tests.support.site import TestSite
from tests.support.waiting import eventually

SHOPPER_AGENT = "ShopperBot/2.0 (+https://shop.example/bot)"
SID = "sid-gate-Zk31"
PROFILE: dict[str, Any] = {
    "headers": [{"name": "X-Store", "value": "berlin-7"}],
    "cookies": [{"name": "zip", "value": "10115"}, {"name": "sid", "value": SID, "secret": True}],
}


def _gate(site: TestSite) -> None:
    """robots.txt and /pics/… answer 403 unless the shopper's cookies, header and agent come."""
    site.set_gate(
        {"zip": "10115", "sid": SID}, {"X-Store": "berlin-7", "User-Agent": SHOPPER_AGENT}
    )


async def test_robots_txt_is_fetched_with_the_domains_profile(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    rules = "User-agent: *\nDisallow: /private/\n"
    site.set_robots(rules)
    _gate(site)
    ids = {}
    for host, given in (("127.0.0.1", PROFILE), ("127.0.0.2", {})):
        body = {
            "domain_name": host,
            "base_url": site.url("/", host=host).rstrip("/"),
            "user_agent": SHOPPER_AGENT,
            "request_profile": given,
        }
        created = await api.post("/api/domains", json=body)
        assert created.status_code == 201, created.text
        ids[host] = created.json()["id"]
    shopper = await api.post(f"/api/domains/{ids['127.0.0.1']}/refresh-robots")
    assert shopper.status_code == 200, shopper.text
    assert shopper.json()["robots_txt_content"] == rules
    assert SID not in shopper.text
    # The same site without the profile: refused (403, "unavailable": no rules read).
    bare = await api.post(f"/api/domains/{ids['127.0.0.2']}/refresh-robots")
    assert bare.json()["robots_txt_content"] == ""
    gated = [r.status for r in site.requests() if r.path == "/robots.txt"]
    assert sorted(gated) == [200, 403]


async def test_product_images_are_fetched_with_the_domains_profile(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(image_max_bytes=100_000, image_poll_seconds=0.05)
    db = await open_database(settings)
    _gate(site)
    try:
        [task_id] = await submit(db, settings, site.url("/gallery/9"))
        stored = seal(PROFILE, SecretBox(settings), None, "request_profile")
        async with db.session() as session:
            await session.execute(
                update(Domain)
                .where(Domain.domain_name == "127.0.0.1")
                .values(download_images=True, user_agent=SHOPPER_AGENT, request_profile=stored)
            )
        pool = WorkerPool(db, settings, concurrency=2)
        runner = asyncio.create_task(pool.run())

        async def tried() -> dict[str, ProductImage] | None:
            async with db.reader() as session:
                rows = list(await session.scalars(select(ProductImage)))
            done = {r.image_url.rsplit("/", 1)[1]: r for r in rows if r.fetched_at is not None}
            return done if "photo.png" in done and "snap.jpg" in done else None

        try:
            images = await eventually(tried, "the gallery's images tried")
        finally:
            pool.stop()
            await runner
        assert task_id
        for name in ("photo.png", "snap.jpg"):
            assert (images[name].error, images[name].image_path is not None) == (None, True)
        pics = [r.status for r in site.requests() if r.path in ("/pics/photo.png", "/robots.txt")]
        assert pics and set(pics) == {200}  # through the gate: robots.txt and the image
    finally:
        await db.dispose()
