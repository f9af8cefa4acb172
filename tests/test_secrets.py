"""No secret in clear anywhere: not in any API response, any log line, or any database row.

The secrets: both API keys, the FORAGER_SECRET_KEY, and proxy passwords given every way the
API takes them (create, bulk lines, bulk objects, update, a bad bulk line) and then used for
real (a proxy test and a crawl through an authenticating loopback proxy, and a refused one).
After all that, every GET endpoint in the OpenAPI document is read and every table dumped; every
answer the API gave on the way (each POST and PATCH as well as each GET) is searched. The
secrets the server makes (agent tokens, a webhook's signing secret) are shown once, in the
answer that made them, and nowhere else.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from forager.api.deps import Runtime
from forager.db.models import Base
from forager.items.persist import ItemBatch, ItemInput, save_items
from forager.parse.base import ItemRecord
from forager.parse.items import check_item
from tests.support import sticky
from tests.support.crawling import crawl
from tests.support.proxy import TestProxy
from tests.support.site import TestSite

CREATED = "pw-created-7f3k"
UPDATED = "pw-updated-Q9zr"
BULK_LINE = "pw-bulkline-2Lx8"
BULK_OBJECT = "pw-bulkobject-Hh4"
BAD_LINE = "pw-badline-Vv61"
WRONG = "pw-wrong-Zq02"
SERVICE_KEY = "svc-key-Rt5m"  # a worker service's and a writer's API keys (missions)
APPRISE = "pw-apprise-Kd8w"  # in an Apprise URL (alerts)
HOOK_TOKEN = "hooktoken-Mm3p"  # in a webhook URL's path (alerts)
PROFILE_TOKEN = "Bearer pt-profile-Wc7n"  # a request profile's Authorization header
PROFILE_COOKIE = "pc-profile-Jd5e"  # a request profile's cookie marked secret
PASSWORDS = (
    CREATED,
    UPDATED,
    BULK_LINE,
    BULK_OBJECT,
    BAD_LINE,
    WRONG,
    SERVICE_KEY,
    APPRISE,
    HOOK_TOKEN,
    PROFILE_TOKEN,
    PROFILE_COOKIE,
)


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


def _ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


async def _use_every_secret(
    api: httpx.AsyncClient, site: TestSite, shown: dict[str, httpx.Response]
) -> dict[str, int]:
    """Give the API every kind of secret and make the server use them; the ids made.

    Secrets the server makes (agent tokens, a webhook's signing secret) go into ``shown``, each
    with the one answer allowed to show it.
    """
    with TestProxy(username="crawler", password=UPDATED) as good:
        proxy = _ok(
            await api.post(
                "/api/proxies",
                json={
                    "proxy_url": "127.0.0.1",
                    "proxy_port": good.port,
                    "proxy_username": "crawler",
                    "proxy_password": CREATED,
                },
            ),
            201,
        )
        _ok(await api.patch(f"/api/proxies/{proxy['id']}", json={"proxy_password": UPDATED}))
        bulk = _ok(
            await api.post(
                "/api/proxies/bulk",
                json={
                    "lines": f"http://bulk:{BULK_LINE}@127.0.0.9:9\n"
                    f"gopher://bad:{BAD_LINE}@127.0.0.9:10\n",
                    "proxies": [
                        {
                            "proxy_url": "127.0.0.9",
                            "proxy_port": 11,
                            "proxy_username": "obj",
                            "proxy_password": BULK_OBJECT,
                        }
                    ],
                },
            )
        )
        assert (bulk["created"], bulk["invalid"]) == (2, 1)

        url = site.url("/product/5", host="127.0.0.3")
        tested = _ok(await api.post(f"/api/proxies/{proxy['id']}/test", json={"url": url}))
        assert tested["ok"] is True

        # Alerts: a webhook (its signing secret shown once) and an Apprise URL with a password;
        # the crawl below fires both, and the deliveries fail (nothing listens there).
        made = await api.post(
            "/api/alerts/rules",
            json={"name": "hook", "kind": "back_in_stock", "fire_on_first": True,
                  "webhook_url": f"http://127.0.0.1:9/{HOOK_TOKEN}"},
        )  # fmt: skip
        hook = _ok(made, 201)
        shown[hook["secret"]] = made
        _ok(
            await api.post(
                "/api/alerts/rules",
                json={"name": "mail", "kind": "back_in_stock", "fire_on_first": True,
                      "apprise_url": f"mailto://me:{APPRISE}@127.0.0.1:9"
                                     "?from=a@example.com&to=ops@example.com"},
            ),
            201,
        )  # fmt: skip
        submitted = _ok(await api.post("/api/tasks", json={"url": url, "batch_name": "b1"}), 201)
        task_id, domain_id = submitted["task"]["id"], submitted["task"]["domain_id"]
        _ok(await api.post(f"/api/domains/{domain_id}/proxies", json={"proxy_ids": [proxy["id"]]}))
        profile = {
            "headers": [{"name": "Authorization", "value": PROFILE_TOKEN}],
            "cookies": [{"name": "sid", "value": PROFILE_COOKIE, "secret": True}],
        }
        # Sticky sessions (issue 33): the warm-up's session cookie (``sticky.MARK``) is a secret.
        sessions = {"warmup_url": site.url("/sticky/warm", host="127.0.0.3")}
        patch = {"request_profile": profile, "sticky_sessions": sessions}
        _ok(await api.patch(f"/api/domains/{domain_id}", json=patch))
        runtime = _runtime(api)
        done = await crawl(runtime.db, runtime.settings, [task_id], concurrency=1)
        assert done[task_id].status == "completed", done[task_id].error_message
        assert good.count >= 3  # the test, the warm-up and the crawl went through the proxy
        listed = _ok(await api.get(f"/api/domains/{domain_id}/sessions"))["items"]
        assert [(s["proxy_id"], s["has_cookies"]) for s in listed] == [(proxy["id"], True)]

        # A refused password: the proxy's 407 is reported without the password in it.
        _ok(await api.patch(f"/api/proxies/{proxy['id']}", json={"proxy_password": WRONG}))
        refused = _ok(await api.post(f"/api/proxies/{proxy['id']}/test", json={"url": url}))
        assert (refused["ok"], refused["error_type"]) == (False, "proxy")
        products = _ok(await api.get("/api/products"))["items"]
    # Agent tokens: the one shown at creation and the one a rotation shows.
    made = await api.post("/api/agents", json={"name": "home-1"})
    agent = _ok(made, 201)
    shown[agent["token"]] = made
    made = await api.post(f"/api/agents/{agent['id']}/rotate-token")
    shown[_ok(made)["token"]] = made
    # Missions: the API keys of a worker service and a writer, then a connection test of each.
    service = {"name": "w", "url": "http://127.0.0.1:9", "api_key": SERVICE_KEY}
    worker = _ok(await api.post("/api/worker-services", json=service), 201)
    writer = _ok(await api.post("/api/writers", json=service), 201)
    _ok(await api.post(f"/api/worker-services/{worker['id']}/test"))
    _ok(await api.post(f"/api/writers/{writer['id']}/test"))
    mission = {"date_start": "2026-01-01", "date_end": "2026-01-01", "languages": ["pt"]}
    missions = _ok(await api.post("/api/missions", json=mission), 201)["missions"]
    watched = {"url": site.url("/product/3"), "parser_name": "generic", "name": "watched"}
    monitor = _ok(await api.post("/api/monitors", json=watched), 201)
    deliveries = _ok(await api.get("/api/alerts/deliveries"))["items"]
    crawl_job = {"name": "sweep", "start_urls": [site.url("/shop/")], "max_pages": 1}
    job = _ok(await api.post("/api/jobs", json=crawl_job), 201)
    selector = {"fields": {"product_name": {"css": "h1"}}, "use": False}
    version = _ok(await api.post(f"/api/domains/{domain_id}/selector-parsers", json=selector), 201)
    # An item, as a parser that reads ads would leave it.
    ad = check_item(ItemRecord("ad", "a1", {"title": "Bike", "price": "10.00"}), 0)
    async with _runtime(api).db.session() as session:
        batch = ItemBatch((ad,), url, "test", "1")
        await save_items(session, [ItemInput(domain_id, task_id, batch)])
    feed = {"name": "daily", "kind": "products", "format": "jsonl", "destination": "directory"}
    made_feed = _ok(await api.post("/api/feeds", json=feed), 201)
    items = _ok(await api.get("/api/items"))["items"]
    images = _ok(await api.get(f"/api/products/{products[0]['id']}/images"))
    return {
        "item_id": items[0]["id"],
        "image_id": images[0]["id"],
        "rule_id": hook["id"],
        "delivery_id": deliveries[0]["id"],
        "version": version["version"],
        "monitor_id": monitor["id"],
        "job_id": job["id"],
        "feed_id": made_feed["id"],
        "name": "b1",
        "mission_id": missions[0]["id"],
        "service_id": worker["id"],
        "writer_id": writer["id"],
        "agent_id": agent["id"],
        "task_id": task_id,
        "domain_id": domain_id,
        "proxy_id": proxy["id"],
        "product_id": products[0]["id"],
    }


async def _read_everything(api: httpx.AsyncClient, ids: dict[str, int]) -> list[httpx.Response]:
    """Every GET in the OpenAPI document, path parameters filled with real ids, plus a 401."""
    spec = _ok(await api.get("/openapi.json"))
    responses = []
    for path, operations in spec["paths"].items():
        if "get" not in operations:
            continue
        concrete = re.sub(r"\{(\w+)\}", lambda m: str(ids[m.group(1)]), path)
        response = await api.get(concrete)
        # A monitor nobody has polled yet has no data to show (409), and with no process to run
        # it /health says down (503, its body read like any other); every other read is 200.
        # The product's images are not downloaded (its domain does not ask for it): no content.
        expected = {
            "/api/monitors/{monitor_id}/data": 409,
            "/health": 503,
            "/api/products/{product_id}/images/{image_id}/content": 404,
        }.get(path, 200)
        assert response.status_code == expected, f"{concrete}: {response.text[:300]}"
        responses.append(response)
    # A wrong key is refused without being echoed back.
    responses.append(await api.get("/api/tasks", headers={"Authorization": f"Bearer {WRONG}"}))
    assert responses[-1].status_code == 401
    assert len(responses) >= 15
    return responses


async def _every_stored_value(api: httpx.AsyncClient) -> str:
    chunks = []
    async with _runtime(api).db.reader() as session:
        for table in Base.metadata.sorted_tables:
            for row in (await session.execute(select(table))).all():
                chunks.append(repr(tuple(row)))
    return "\n".join(chunks)


@pytest.mark.slow
async def test_no_secret_in_any_response_log_line_or_row(
    api: httpx.AsyncClient, site: TestSite, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    runtime = _runtime(api)
    assert runtime.settings.secret_key is not None
    keys: dict[str, str] = api.keys  # type: ignore[attr-defined]
    secrets = [
        *PASSWORDS,
        sticky.MARK,
        *keys.values(),
        runtime.settings.secret_key.get_secret_value(),
    ]

    answers: list[httpx.Response] = []  # every answer the client gets, whatever the method

    async def keep(response: httpx.Response) -> None:
        answers.append(response)

    api.event_hooks["response"].append(keep)
    shown: dict[str, httpx.Response] = {}
    ids = await _use_every_secret(api, site, shown)
    assert len(shown) == 3 and all(len(s) >= 32 for s in shown)  # 2 agent tokens, 1 webhook's
    responses = await _read_everything(api, ids)
    stored = await _every_stored_value(api)

    secrets += list(shown)
    writes = [r for r in answers if r.request.method in ("POST", "PATCH")]
    assert {r.request.method for r in writes} == {"POST", "PATCH"} and len(writes) >= 19
    assert set(responses) <= set(answers)
    for response in answers:
        seen = response.text + repr(dict(response.headers))
        # A made secret may be in the answer that made it, once; nothing else anywhere.
        made_here = {s for s, answer in shown.items() if answer is response and seen.count(s) == 1}
        leaked = [s for s in secrets if s in seen and s not in made_here]
        assert not leaked, f"{response.request.method} {response.request.url} returned a secret"
    # What was exempted was really there: each made secret, once, in the answer that made it.
    assert all(s in answer.text for s, answer in shown.items())
    assert not [s for s in secrets if s in caplog.text], "a secret reached the log"
    assert not [s for s in secrets if s in stored], "a secret is stored in clear"
    # The sweep saw what it should: the proxy rows and the product are really there.
    assert '"password_set":true' in "".join(r.text for r in responses).replace(" ", "")
    assert "127.0.0.9" in stored
