"""Issue 33: request profiles. A domain's headers and cookies go out with every fetch (each of the
three fetchers, and agents), so a shop prices for the shopper's locale; secret values are stored
sealed and never shown; unsafe headers are refused with a 422 naming the field."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import select, text

from forager.agents import admin as agents_admin
from forager.agents.client import AgentClient
from forager.api.deps import Runtime
from forager.apikeys import create_key
from forager.crypto import SecretBox
from forager.db.models import Product
from forager.domains.profile import MAX_BODY, MAX_ENTRIES, MAX_VALUE, open_profile
from forager.errors import FetchError
from forager.fetch.base import FetchRequest
from forager.fetch.fetcher_set import build_fetcher
from forager.parse.registry import get_parser
from tests.conftest import SettingsFactory
from tests.support.agents import app_server
from tests.support.crawling import crawl, tasks_by_id
from tests.support.fetching import fetch_settings, require
from tests.support.site import TestSite
from tests.support.waiting import eventually

TOKEN = "Bearer tok-profile-Xq81"
SESSION = "sess-profile-Lp42"
GERMAN = {
    "headers": [
        {"name": "Accept-Language", "value": "de-DE,de;q=0.9"},
        {"name": "Authorization", "value": TOKEN},
    ],
    "cookies": [
        {"name": "locale", "value": "de-DE"},
        {"name": "sid", "value": SESSION, "secret": True},
    ],
}


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def _domain(api: httpx.AsyncClient, host: str, **values: Any) -> dict[str, Any]:
    response = await api.post("/api/domains", json={"domain_name": host, **values})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_secret_values_are_sealed_never_shown_and_kept_when_left_out(
    api: httpx.AsyncClient,
) -> None:
    domain = await _domain(api, "shop.example", request_profile=GERMAN)
    shown = domain["request_profile"]
    assert shown["headers"] == [
        {"name": "Accept-Language", "value": "de-DE,de;q=0.9", "secret": False},
        {"name": "Authorization", "value": None, "secret": True},  # always secret
    ]
    assert shown["cookies"][1] == {"name": "sid", "value": None, "secret": True}
    answers = [json.dumps(domain)]
    answers.append((await api.get(f"/api/domains/{domain['id']}")).text)
    answers.append((await api.get("/api/domains")).text)
    # A new public header, the secrets left out: they are kept as stored.
    kept = {
        "headers": [
            {"name": "Accept-Language", "value": "fr-FR"},
            {"name": "Authorization", "secret": True},
        ],
        "cookies": [{"name": "sid", "secret": True}],
    }
    patched = await api.patch(f"/api/domains/{domain['id']}", json={"request_profile": kept})
    assert patched.status_code == 200, patched.text
    answers.append(patched.text)
    for answer in answers:
        assert TOKEN not in answer and SESSION not in answer
    runtime = _runtime(api)
    async with runtime.db.reader() as session:
        stored = (
            await session.execute(
                text("SELECT request_profile FROM domains WHERE id = :id"), {"id": domain["id"]}
            )
        ).scalar_one()
    raw = stored if isinstance(stored, str) else json.dumps(stored)
    assert TOKEN not in raw and SESSION not in raw and "fr-FR" in raw
    profile = json.loads(raw) if isinstance(stored, str) else stored
    opened = open_profile(profile, None, SecretBox(runtime.settings))
    assert opened.headers == {"Accept-Language": "fr-FR", "Authorization": TOKEN}
    assert opened.cookies == {"sid": SESSION}
    assert TOKEN not in repr(FetchRequest("https://shop.example/", "ua", headers=opened.headers))
    # A secret cannot be "kept" where none is stored; {} clears the profile.
    missing = {"cookies": [{"name": "other", "secret": True}]}
    refused = await api.patch(f"/api/domains/{domain['id']}", json={"request_profile": missing})
    assert refused.status_code == 422, refused.text
    assert "request_profile.cookies.0.value" in refused.text
    cleared = await api.patch(f"/api/domains/{domain['id']}", json={"request_profile": {}})
    assert cleared.json()["request_profile"] is None


# (profile, the field the 422 names; None: refused at the edge, before any field is read)
UNSAFE: list[tuple[dict[str, Any], str | None]] = [
    ({"headers": [{"name": "X-A", "value": "a\r\nX-Evil: 1"}]}, "headers.0.value"),
    ({"headers": [{"name": "X-A", "value": "a\nb"}]}, "headers.0.value"),
    # NUL anywhere in a body is refused at the edge, before any field is read.
    ({"headers": [{"name": "X-A\x00", "value": "a"}]}, None),
    ({"cookies": [{"name": "c", "value": "a\x00"}]}, None),
    ({"cookies": [{"name": "c", "value": "a\r\nb"}]}, "cookies.0.value"),
    ({"cookies": [{"name": "c", "value": "a; admin=1"}]}, "cookies.0.value"),
    ({"headers": [{"name": "X-A", "value": "v" * (MAX_VALUE + 1)}]}, "headers.0.value"),
    ({"headers": [{"name": "X" * 101, "value": "a"}]}, "headers.0.name"),
    ({"headers": [{"name": f"X-{i}", "value": "a"} for i in range(MAX_ENTRIES + 1)]}, "headers"),
    ({"headers": [{"name": "X-A", "value": "1"}, {"name": "x-a", "value": "2"}]}, ""),
    *(
        ({"headers": [{"name": name, "value": "x"}]}, "headers.0.name")
        for name in (
            "Host",
            "Connection",
            "Content-Length",
            "Transfer-Encoding",
            "TE",
            "Upgrade",
            "Keep-Alive",
            "Proxy-Authorization",
            "Proxy-Connection",
            "Cookie",
        )
    ),
]


async def test_unsafe_headers_are_refused_naming_the_field(api: httpx.AsyncClient) -> None:
    domain = await _domain(api, "strict.example")
    for profile, field in UNSAFE:
        body = {"request_profile": profile}
        response = await api.patch(f"/api/domains/{domain['id']}", json=body)
        assert response.status_code == 422, (profile, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        if field is None:
            assert "NUL characters are not accepted" in response.text
        else:
            fields = [e["field"] for e in response.json()["errors"]]
            assert f"request_profile.{field}".rstrip(".") in fields, (profile, fields)
    assert (await api.get(f"/api/domains/{domain['id']}")).json()["request_profile"] is None


async def test_a_crawl_with_the_profile_gets_the_shoppers_price(
    api: httpx.AsyncClient, make_settings: SettingsFactory, site: TestSite
) -> None:
    host = "127.0.0.3"
    base_url = site.url("/", host=host).rstrip("/")
    await _domain(api, host, base_url=base_url, crawl_delay_seconds=0, request_profile=GERMAN)
    response = await api.post("/api/tasks", json={"url": site.url("/shop/10", host=host)})
    assert response.status_code == 201, response.text
    ids = [response.json()["task"]["id"]]
    runtime = _runtime(api)
    tasks = await crawl(runtime.db, make_settings(), ids)
    assert tasks[ids[0]].status == "completed", tasks[ids[0]].error_message
    async with runtime.db.reader() as session:
        product = await session.scalar(select(Product).where(Product.crawl_task_id == ids[0]))
    assert product is not None
    assert (product.price, product.currency) == (Decimal("9.89"), "EUR")  # not 10.99 USD


@pytest.mark.parametrize("kind", ["http", "impersonate", "browser"])
async def test_every_fetcher_sends_the_profile_and_posts_bodies(
    kind: str, site: TestSite, tmp_path: Path
) -> None:
    require(kind)
    # "all": the page's script on another loopback host may load (see the browser's part).
    fetcher = build_fetcher(kind, fetch_settings(tmp_path, private_targets="all"))
    headers = {"Accept-Language": "de-DE", "X-Store": "berlin-7"}
    cookies = {"locale": "de-DE", "zip": "10115"}
    lookup = site.url("/lookup")
    try:
        bare = await fetcher.fetch(FetchRequest(site.url("/shop/4"), "shopper/1"))
        echoed = (
            await fetcher.fetch(
                FetchRequest(site.url("/echo-headers"), "shopper/1", headers=headers,
                             cookies=cookies)
            )
        ).text  # fmt: skip
        page = await fetcher.fetch(
            FetchRequest(site.url("/shop/4"), "shopper/1", headers=headers, cookies=cookies)
        )
        as_json = await fetcher.fetch(
            FetchRequest(lookup, "shopper/1", method="POST", body=b'{"n": 12}',
                         body_type="application/json")
        )  # fmt: skip
        as_form = await fetcher.fetch(
            FetchRequest(lookup, "shopper/1", method="POST", body=b"n=13",
                         body_type="application/x-www-form-urlencoded")
        )  # fmt: skip
        # The same URL with a GET: the site answers POST only.
        with pytest.raises(FetchError) as refused:
            await fetcher.fetch(FetchRequest(lookup, "shopper/1"))
        if kind == "browser":  # a script from another host gets none of the profile's headers
            elsewhere = quote(site.url("/echo-headers", host="127.0.0.2"))
            with_script = site.url(f"/with-script?src={elsewhere}")
            await fetcher.fetch(FetchRequest(with_script, "shopper/1", headers=headers))
    finally:
        await fetcher.aclose()
    sent = json.loads(echoed[echoed.index("{") : echoed.rindex("}") + 1])
    assert sent["accept-language"] == "de-DE" and sent["x-store"] == "berlin-7"
    assert sorted(sent["cookie"].split("; ")) == ["locale=de-DE", "zip=10115"]
    assert sent["user-agent"] == "shopper/1"
    parser = get_parser("generic")
    record = parser.parse(page.text, page.url)
    assert (record.price, record.currency) == (Decimal("4.49"), "EUR")
    record = parser.parse(bare.text, bare.url)
    assert (record.price, record.currency) == (Decimal("4.99"), "USD")
    for response, n in ((as_json, 12), (as_form, 13)):
        assert parser.parse(response.text, response.url).product_name == f"Test Product {n}"
    assert refused.value.status_code == 405
    if kind == "browser":
        [other] = [e for h, e in site.state.echoed if h == "127.0.0.2"]
        assert "x-store" not in other and other.get("accept-language") != "de-DE"
    posts = [r for r in site.requests() if r.path == "/lookup"]
    assert [r.method for r in posts] == ["POST", "POST", "GET"]


# -- requests beyond GET ----------------------------------------------------------------------


async def test_a_post_task_is_its_own_task_and_produces_a_product(
    api: httpx.AsyncClient, make_settings: SettingsFactory, site: TestSite
) -> None:
    host = "127.0.0.4"
    base_url = site.url("/", host=host).rstrip("/")
    await _domain(api, host, base_url=base_url, crawl_delay_seconds=0)
    url = site.url("/lookup", host=host)

    async def submit(request: dict[str, Any]) -> httpx.Response:
        body = {"url": url, "max_retries": 0, "request": request}
        return await api.post("/api/tasks", json=body)

    secret = {"name": "Authorization", "value": TOKEN}
    post = {"method": "POST", "json_body": {"n": 21}, "headers": [secret]}
    first = await submit(post)
    assert first.status_code == 201, first.text
    shown = first.json()["task"]["fetch_request"]
    assert shown["method"] == "POST" and shown["body"] == '{"n":21}'
    assert shown["profile"]["headers"] == [{"name": "Authorization", "value": None, "secret": True}]
    assert TOKEN not in first.text
    again = await submit(post)
    assert again.status_code == 200  # the same request: the same task
    assert again.json()["task"]["id"] == first.json()["task"]["id"]
    other = await submit({"method": "POST", "form": {"n": "22"}})
    get = await api.post("/api/tasks", json={"url": url, "max_retries": 0})
    ids = [first.json()["task"]["id"], other.json()["task"]["id"], get.json()["task"]["id"]]
    assert (other.status_code, get.status_code) == (201, 201)
    assert len(set(ids)) == 3  # a POST and a GET of one URL, two bodies: three tasks
    bad = await submit({"method": "GET", "json_body": {"n": 1}})
    assert bad.status_code == 422 and "request.method" in bad.text
    big = await submit({"method": "POST", "json_body": {"n": "1" * (MAX_BODY + 1)}})
    assert big.status_code == 422 and "request.json_body" in big.text

    runtime = _runtime(api)
    tasks = await crawl(runtime.db, make_settings(), ids)
    assert [tasks[i].status for i in ids] == ["completed", "completed", "failed"]
    assert tasks[ids[2]].http_status_code == 405  # the GET of a POST-only API
    async with runtime.db.reader() as session:
        names = {
            p.crawl_task_id: p.product_name
            for p in await session.scalars(select(Product).where(Product.crawl_task_id.in_(ids)))
        }
    assert names == {ids[0]: "Test Product 21", ids[1]: "Test Product 22"}


# -- agents --------------------------------------------------------------------------------


async def test_an_agent_fetches_with_the_profile_and_the_tasks_request(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    """The real agent program against the real app on loopback: the German domain's price, and
    a POST task with the profile's secret header, both fetched by the agent."""
    host = "127.0.0.5"
    settings = make_settings(serve_workers=0, agent_heartbeat_seconds=0.5)
    async with app_server(settings) as (url, app):
        db = app.state.runtime.db
        _, token = await agents_admin.create_agent(db, "home-1")
        _, key = await create_key(db, "ops", "admin")
        auth = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=20) as http:
            domain = {
                "domain_name": host,
                "base_url": site.url("/", host=host).rstrip("/"),
                "crawl_delay_seconds": 0,
                "request_profile": GERMAN,
            }
            assert (await http.post("/api/domains", json=domain)).status_code == 201
            ids = []
            for body in (
                {"url": site.url("/shop/8", host=host)},
                {
                    "url": site.url("/lookup", host=host),
                    "request": {"method": "POST", "form": {"n": "9"}},
                },
            ):
                response = await http.post("/api/tasks", json=body)
                assert response.status_code == 201, response.text
                ids.append(response.json()["task"]["id"])
        client = AgentClient(url, token, concurrency=1, backoff_max=1.0)
        runner = asyncio.create_task(client.run())
        try:
            await eventually(lambda: _all_completed(db, ids), "the agent's tasks")
        finally:
            client.stop()
            async with asyncio.timeout(20):
                assert await runner == 0
        async with db.reader() as session:
            products = {
                p.crawl_task_id: (p.product_name, p.price, p.currency)
                for p in await session.scalars(
                    select(Product).where(Product.crawl_task_id.in_(ids))
                )
            }
    assert products == {
        ids[0]: ("Test Product 8", Decimal("8.09"), "EUR"),  # 8.99 USD less 10 %: the profile
        ids[1]: ("Test Product 9", Decimal("9.99"), "USD"),
    }
    assert [r.method for r in site.requests() if r.path == "/lookup"] == ["POST"]


async def _all_completed(db: Any, ids: list[int]) -> bool:
    tasks = await tasks_by_id(db, ids)
    return all(t.status == "completed" for t in tasks.values())
