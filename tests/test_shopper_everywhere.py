"""Issue 33: the request profile everywhere a domain is fetched. robots.txt and product images
go out with the domain's headers, cookies and user agent as its pages do (a shop that answers
them only to a shopper), against the test site's shopper gate on loopback; a crawl job's own
profile goes out with every task it discovers; and a parser plugin reads a JSON POST answer
(the body as text) into products."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from forager.agents import admin as agents_admin
from forager.agents.client import AgentClient
from forager.apikeys import create_key
from forager.crypto import SecretBox
from forager.db.models import Domain, Product, ProductImage
from forager.domains.profile import open_profile, seal, seal_request
from forager.runtime import open_database
from forager.worker.pool import WorkerPool
from tests.conftest import SettingsFactory
from tests.support.agents import app_server
from tests.support.crawling import crawl, run_pool_until, submit
from tests.support.jsonparser import JsonApiParser
from tests.support.site import TestSite
from tests.support.waiting import eventually

SHOPPER_AGENT = "ShopperBot/2.0 (+https://shop.example/bot)"
SID = "sid-gate-Zk31"
PROFILE: dict[str, Any] = {
    "headers": [{"name": "X-Store", "value": "berlin-7"}],
    "cookies": [{"name": "zip", "value": "10115"}, {"name": "sid", "value": SID, "secret": True}],
}


def _gate(site: TestSite, paths: tuple[str, ...] = ("/robots.txt", "/pics/")) -> None:
    """``paths`` answer 403 unless the shopper's cookies, header and user agent come."""
    site.set_gate(
        {"zip": "10115", "sid": SID}, {"X-Store": "berlin-7", "User-Agent": SHOPPER_AGENT}, paths
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


JOB_RULES = [
    {"pattern": "/shop/c/[a-z]+$", "action": "follow"},
    {"pattern": "http://**/shop/p/*", "action": "parse", "syntax": "glob"},
]


async def test_every_fetch_of_a_job_carries_its_profile(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    """The job's profile (no domain profile at all) goes out with each task it discovers; its
    secret is sealed and never shown; a bad header is refused as a task's would be."""
    body: dict[str, Any] = {
        "name": "shopper job",
        "start_urls": [site.url("/shop/")],
        "rules": JOB_RULES,
        "max_depth": 2,
        "max_pages": 12,
    }
    bad = {**body, "request_profile": {"headers": [{"name": "Host", "value": "x"}]}}
    refused = await api.post("/api/jobs", json=bad)
    assert refused.status_code == 422, refused.text
    assert "request_profile.headers.0.name" in [e["field"] for e in refused.json()["errors"]]
    _gate(site, ("/shop/",))
    override = {**PROFILE, "user_agent": SHOPPER_AGENT}
    started = await api.post("/api/jobs", json={**body, "request_profile": override})
    assert started.status_code == 201, started.text
    job = started.json()
    assert job["request_profile"]["cookies"][1] == {"name": "sid", "value": None, "secret": True}
    runtime: Any = api.app.state.runtime  # type: ignore[attr-defined]

    async def ended() -> dict[str, Any] | None:
        shown = (await api.get(f"/api/jobs/{job['id']}")).json()
        progress = shown["progress"]
        return shown if progress["queued"] == 0 and progress["in_flight"] == 0 else None

    done = await run_pool_until(runtime.db, runtime.settings, ended, concurrency=4, timeout=60)
    assert SID not in json.dumps(done) and SID not in started.text
    assert done["progress"]["errors"] == 0, done
    assert done["progress"]["parsed"] >= 1 and done["progress"]["discovered"] >= 4
    shop = [r for r in site.requests() if r.path.startswith("/shop/")]
    assert len(shop) >= 4 and {r.status for r in shop} == {200}  # each through the gate


# The parse processes' path, not SQL: a JSON POST crawled on both engines is
# tests/test_json_responses.py.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_plugin_parses_a_json_post_answer_into_products(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(parser_modules=["tests.support.jsonparser"], parse_processes=1)
    db = await open_database(settings)
    try:
        site.set_price(21, "21.07", available=False)
        box = SecretBox(settings)
        ids = []
        for n in (21, 22):
            sealed = seal_request({"method": "POST", "json_body": {"n": n}}, box)
            ids += await submit(
                db, settings, site.url("/api/product"), parser_name=JsonApiParser.name,
                fetch_request=sealed,
            )  # fmt: skip
        tasks = await crawl(db, settings, ids)
        assert [tasks[i].status for i in ids] == ["completed", "completed"], [
            tasks[i].error_message for i in ids
        ]
        async with db.reader() as session:
            rows = await session.scalars(select(Product).where(Product.crawl_task_id.in_(ids)))
            found = {
                p.crawl_task_id: (p.product_name, p.price, p.currency, p.sku, p.is_available)
                for p in rows
            }
        assert found == {
            ids[0]: ("Test Product 21", Decimal("21.07"), "USD", "SKU-21", False),
            ids[1]: ("Test Product 22", Decimal("22.99"), "USD", "SKU-22", True),
        }
        assert tasks[ids[0]].parser_name == JsonApiParser.name
        assert [r.method for r in site.requests() if r.path == "/api/product"] == ["POST"] * 2
    finally:
        await db.dispose()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # no database: the settings' key
def test_a_tasks_profile_goes_over_its_jobs_and_the_jobs_over_its_domains(
    make_settings: SettingsFactory,
) -> None:
    box = SecretBox(make_settings())
    domain = seal(
        {
            "headers": [{"name": "Accept-Language", "value": "en"}, {"name": "X-A", "value": "d"}],
            "cookies": [{"name": "zip", "value": "1"}, {"name": "store", "value": "d"}],
        },
        box,
        None,
        "request_profile",
    )
    job = seal(
        {
            "user_agent": "JobAgent/1",
            "headers": [{"name": "accept-language", "value": "de"}],
            "cookies": [
                {"name": "zip", "value": "2"},
                {"name": "sid", "value": SID, "secret": True},
            ],
        },
        box,
        None,
        "request_profile",
    )
    task = seal({"cookies": [{"name": "zip", "value": "3"}]}, box, None, "request")
    opened = open_profile(domain, task, box, job=job)
    assert opened.headers == {"accept-language": "de", "X-A": "d"}  # one Accept-Language
    assert opened.cookies == {"zip": "3", "store": "d", "sid": SID}
    assert opened.user_agent == "JobAgent/1"
    assert open_profile(domain, None, box).cookies == {"zip": "1", "store": "d"}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the agent's wiring, not SQL
async def test_an_agent_fetches_a_jobs_tasks_with_the_jobs_profile(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    """The real agent program (no built-in workers): each page of the job passes the gate."""
    settings = make_settings(serve_workers=0, agent_heartbeat_seconds=0.5)
    _gate(site, ("/shop/",))
    async with app_server(settings) as (url, app):
        db = app.state.runtime.db
        _, token = await agents_admin.create_agent(db, "home-job")
        _, key = await create_key(db, "ops", "admin")
        body = {
            "name": "agent job",
            "start_urls": [site.url("/shop/c/kettles")],
            "rules": [{"pattern": "http://**/shop/p/*", "action": "parse", "syntax": "glob"}],
            "max_depth": 1,
            "max_pages": 4,
            "request_profile": {**PROFILE, "user_agent": SHOPPER_AGENT},
        }
        auth = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=20) as http:
            started = await http.post("/api/jobs", json=body)
            assert started.status_code == 201, started.text
            job_id = started.json()["id"]

            async def ended() -> dict[str, Any] | None:
                shown = (await http.get(f"/api/jobs/{job_id}")).json()
                progress = shown["progress"]
                waiting = progress["queued"] + progress["in_flight"]
                return progress if progress["discovered"] >= 2 and waiting == 0 else None

            client = AgentClient(url, token, concurrency=1, backoff_max=1.0)
            runner = asyncio.create_task(client.run())
            try:
                progress = await eventually(ended, "the job's tasks fetched by the agent")
            finally:
                client.stop()
                async with asyncio.timeout(20):
                    assert await runner == 0
    assert progress["errors"] == 0 and progress["parsed"] >= 1, progress
    shop = [r for r in site.requests() if r.path.startswith("/shop/")]
    assert len(shop) >= 2 and {r.status for r in shop} == {200}
