"""The proxy and domain ↔ proxy mapping API over the real app, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy import update

from forager.api.deps import Runtime
from forager.crypto import SecretBox
from forager.db.models import Domain, DomainProxy, Proxy
from forager.db.types import utcnow
from forager.proxies.retest import retest_due
from tests.support.proxy import TestProxy
from tests.support.site import TestSite
from tests.support.waiting import entity_events, eventually

PASSWORD = "hunter2-s3cr3t:@/"


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    return body


def _fields(response: httpx.Response) -> set[str]:
    return {e["field"] for e in _problem(response, 422)["errors"]}


async def _create(api: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"proxy_url": "proxy1.example.com", "proxy_port": 8080, **fields}
    response = await api.post("/api/proxies", json=body)
    assert response.status_code == 201, response.text
    assert PASSWORD not in response.text
    created: dict[str, Any] = response.json()
    return created


async def _domain(api: httpx.AsyncClient, name: str, *, active: bool = True) -> int:
    async with _runtime(api).db.session() as session:
        domain = Domain(
            domain_name=name,
            base_url=f"https://{name}",
            parser_name="generic",
            user_agent="test",
            is_active=active,
        )
        session.add(domain)
        await session.flush()
        return domain.id


async def _stored(api: httpx.AsyncClient, proxy_id: int) -> Proxy:
    async with _runtime(api).db.reader() as session:
        proxy = await session.get(Proxy, proxy_id)
    assert proxy is not None
    return proxy


async def test_proxy_crud_never_shows_the_password(api: httpx.AsyncClient) -> None:
    api = api
    created = await _create(
        api,
        proxy_url="Proxy1.Example.com",
        proxy_username="crawler",
        proxy_password=PASSWORD,
        country_code="us",
        provider="acme",
        monthly_cost="12.50",
    )
    assert created["password_set"] is True
    assert "proxy_password" not in created
    assert (created["proxy_url"], created["country_code"]) == ("proxy1.example.com", "US")
    assert created["monthly_cost"] == "12.50"
    proxy_id = created["id"]

    stored = await _stored(api, proxy_id)
    assert stored.proxy_password and stored.proxy_password != PASSWORD
    assert SecretBox(_runtime(api).settings).decrypt(stored.proxy_password) == PASSWORD

    for response in (
        await api.get(f"/api/proxies/{proxy_id}"),
        await api.get("/api/proxies"),
        await api.patch(f"/api/proxies/{proxy_id}", json={"city": "Austin"}),
    ):
        assert response.status_code == 200, response.text
        assert PASSWORD not in response.text
        assert stored.proxy_password not in response.text

    listed = (await api.get("/api/proxies", params={"country_code": "US"})).json()
    assert (listed["total"], listed["items"][0]["city"]) == (1, "Austin")
    assert (await api.get("/api/proxies", params={"provider": "other"})).json()["total"] == 0
    assert (await api.get("/api/proxies", params={"is_active": False})).json()["total"] == 0

    # A new password is re-encrypted; an empty one clears it.
    changed = await api.patch(f"/api/proxies/{proxy_id}", json={"proxy_password": "n3w-pass"})
    assert "n3w-pass" not in changed.text
    assert SecretBox(_runtime(api).settings).decrypt(
        (await _stored(api, proxy_id)).proxy_password or ""
    ) == ("n3w-pass")
    cleared = await api.patch(f"/api/proxies/{proxy_id}", json={"proxy_password": ""})
    assert cleared.json()["password_set"] is False
    assert (await _stored(api, proxy_id)).proxy_password is None

    assert (await api.delete(f"/api/proxies/{proxy_id}")).status_code == 204
    _problem(await api.get(f"/api/proxies/{proxy_id}"), 404)
    events = await entity_events(_runtime(api).db, "proxy", proxy_id)
    assert events == ["created", "updated", "updated", "updated", "deleted"]


async def test_read_keys_never_see_a_proxy_username(api: httpx.AsyncClient) -> None:
    """Providers put session or zone tokens in the username: a read key gets it null (and
    ``username_set``) from every read the API offers it, the dashboard's cookie included; an
    admin key still sees it."""
    token = "customer-acme-zone-br-session-8f3a"
    created = await _create(api, proxy_username=token, proxy_password=PASSWORD)
    assert (created["proxy_username"], created["username_set"]) == (token, True)
    proxy_id = created["id"]
    bare = await _create(api, proxy_port=3128)
    assert (bare["proxy_username"], bare["username_set"]) == (None, False)
    domain_id = await _domain(api, "shop.example")
    mapped = await api.post(f"/api/domains/{domain_id}/proxies", json={"proxy_ids": [proxy_id]})
    assert mapped.status_code == 200, mapped.text
    renamed = await api.patch(f"/api/proxies/{proxy_id}", json={"city": "Recife"})
    assert renamed.json()["proxy_username"] == token
    assert (await api.get(f"/api/proxies/{proxy_id}")).json()["proxy_username"] == token

    read = {"Authorization": f"Bearer {api.keys['read']}"}  # type: ignore[attr-defined]
    shown = (await api.get(f"/api/proxies/{proxy_id}", headers=read)).json()
    assert (shown["proxy_username"], shown["username_set"], shown["city"]) == (None, True, "Recife")
    listed = (await api.get("/api/proxies", headers=read)).json()["items"]
    seen = [(p["proxy_username"], p["username_set"]) for p in listed]
    assert seen == [(None, True), (None, False)]

    # Every read the description offers (ids filled in where a path names a proxy or domain).
    ids = {"{proxy_id}": str(proxy_id), "{domain_id}": str(domain_id)}
    paths = []
    for path, operations in api.app.openapi()["paths"].items():  # type: ignore[attr-defined]
        for name, value in ids.items():
            path = path.replace(name, value)
        if "get" in operations and "{" not in path:
            paths.append(path)
    assert f"/api/proxies/{proxy_id}" in paths and f"/api/domains/{domain_id}/proxies" in paths
    for path in paths:
        response = await api.get(path, headers=read)
        assert response.status_code == 200, (path, response.text)
        assert token not in response.text, path

    # The dashboard signed in with the read key reads through the same API.
    async with httpx.AsyncClient(transport=api._transport, base_url="http://forager.test") as ui:
        assert (await ui.post("/ui/login", json={"key": api.keys["read"]})).status_code == 200  # type: ignore[attr-defined]
        page = await ui.get("/api/proxies")
        assert page.status_code == 200 and page.json()["total"] == 2
        assert token not in page.text


async def test_duplicates_and_validation(api: httpx.AsyncClient) -> None:
    api = api
    first = await _create(api, proxy_username="u")
    again = await api.post(
        "/api/proxies",
        json={"proxy_url": "PROXY1.example.com", "proxy_port": 8080, **{"proxy_username": "u"}},
    )
    assert "proxy" in _problem(again, 409)["detail"]
    other = await _create(api, proxy_username="v")  # another username is another proxy
    clash = await api.patch(f"/api/proxies/{other['id']}", json={"proxy_username": "u"})
    _problem(clash, 409)
    assert (await api.get(f"/api/proxies/{first['id']}")).status_code == 200

    bad = await api.post(
        "/api/proxies",
        json={
            "proxy_url": "http://host/x",
            "proxy_port": 70000,
            "proxy_protocol": "ftp",
            "country_code": "USA",
            "proxy_password": PASSWORD,
        },
    )
    assert _fields(bad) == {"proxy_url", "proxy_port", "proxy_protocol", "country_code"}
    assert PASSWORD not in bad.text
    assert _fields(await api.patch(f"/api/proxies/{first['id']}", json={"proxy_port": None})) == {
        "body"
    }
    for url in ("ftp://x", "0" * 100):  # the description's pattern and the validator agree
        assert _fields(await api.post(f"/api/proxies/{first['id']}/test", json={"url": url})) == {
            "url"
        }
    assert _fields(await api.get("/api/proxies", params={"limit": 0})) == {"limit"}


async def test_bulk_lines_report_each_line(api: httpx.AsyncClient) -> None:
    api = api
    await _create(api, proxy_url="known.example.com", proxy_port=3128)
    lines = "\n".join(
        [
            f"http://alice:{quote(PASSWORD, safe='')}@10.0.0.1:8000",
            "socks5://10.0.0.2:1080",
            "# a comment",
            "",
            "https://bob:pw-of-bob@10.0.0.3:notaport",
            "known.example.com:3128",
            "http://10.0.0.2",
            "socks5://10.0.0.2:1080",
        ]
    )
    response = await api.post(
        "/api/proxies/bulk",
        json={"lines": lines, "proxies": [{"proxy_url": "10.0.0.9", "proxy_port": 9}]},
    )
    assert response.status_code == 200, response.text
    assert PASSWORD not in response.text and "pw-of-bob" not in response.text
    body = response.json()
    assert (body["created"], body["duplicate"], body["invalid"]) == (3, 2, 2)
    results = body["results"]
    assert [r["result"] for r in results] == [
        "created",
        "created",
        "invalid",
        "duplicate",
        "invalid",
        "duplicate",
        "created",
    ]
    assert results[0]["input"] == "http://alice:***@10.0.0.1:8000"
    assert "port" in results[2]["error"] and "port" in results[4]["error"]
    assert results[5]["proxy_id"] == results[1]["proxy_id"]
    assert results[6]["input"] == "proxies[0]"

    alice = await _stored(api, results[0]["proxy_id"])
    assert (alice.proxy_username, alice.proxy_protocol, alice.proxy_port) == ("alice", "http", 8000)
    assert SecretBox(_runtime(api).settings).decrypt(alice.proxy_password or "") == PASSWORD
    assert (await api.get("/api/proxies")).json()["total"] == 4
    _problem(await api.post("/api/proxies/bulk", json={"lines": "  \n"}), 422)


async def test_enable_resets_failures_and_stats(api: httpx.AsyncClient) -> None:
    api = api
    a = await _create(api, country_code="DE", provider="acme")
    b = await _create(api, proxy_port=8081, country_code="DE")
    await _create(api, proxy_port=8082)
    async with _runtime(api).db.session() as session:
        await session.execute(
            update(Proxy)
            .where(Proxy.id == a["id"])
            .values(is_active=False, failure_count=12, avg_response_time_ms=100)
        )
        await session.execute(
            update(Proxy).where(Proxy.id == b["id"]).values(avg_response_time_ms=300)
        )

    stats = (await api.get("/api/proxies/stats")).json()
    assert (stats["total"], stats["active"], stats["disabled"]) == (3, 2, 1)
    assert stats["avg_response_time_ms"] == 200.0
    assert stats["by_country"] == [
        {"value": "DE", "total": 2, "active": 1},
        {"value": None, "total": 1, "active": 1},
    ]
    assert stats["by_provider"][0] == {"value": "acme", "total": 1, "active": 0}

    enabled = (await api.post(f"/api/proxies/{a['id']}/enable")).json()
    assert (enabled["is_active"], enabled["failure_count"]) == (True, 0)
    disabled = (await api.post(f"/api/proxies/{b['id']}/disable")).json()
    assert disabled["is_active"] is False
    assert (await api.get("/api/proxies", params={"is_active": False})).json()["total"] == 1
    assert (await entity_events(_runtime(api).db, "proxy", a["id"]))[-1] == "enabled"
    for action in ("enable", "disable", "test"):
        _problem(await api.post(f"/api/proxies/999/{action}", json={"url": "http://x/"}), 404)
    _problem(await api.patch("/api/proxies/999", json={"city": "x"}), 404)
    _problem(await api.delete("/api/proxies/999"), 404)


async def test_test_endpoint_fetches_through_the_proxy(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    api = api
    url = site.url("/product/1")
    with TestProxy(username="crawler", password=PASSWORD) as good, TestProxy(fail=True) as bad:
        good_id = (
            await _create(
                api,
                proxy_url="127.0.0.1",
                proxy_port=good.port,
                proxy_username="crawler",
                proxy_password=PASSWORD,
            )
        )["id"]
        bad_id = (await _create(api, proxy_url="127.0.0.1", proxy_port=bad.port))["id"]
        untested = (await api.get(f"/api/proxies/{good_id}")).json()
        assert (untested["last_test_at"], untested["last_test_ok"]) == (None, None)

        response = await api.post(f"/api/proxies/{good_id}/test", json={"url": url})
        assert response.status_code == 200, response.text
        result = response.json()
        assert (result["ok"], result["status_code"], result["error_type"]) == (True, 200, None)
        assert good.requests == [url]
        tested = (await api.get(f"/api/proxies/{good_id}")).json()
        assert tested["last_test_ok"] is True and tested["last_test_at"] is not None

        failed = await api.post(f"/api/proxies/{bad_id}/test", json={"url": url})
        assert failed.json()["ok"] is False
        assert failed.json()["error_type"] == "proxy"
        assert bad.rejected >= 1
        assert (await api.get(f"/api/proxies/{bad_id}")).json()["last_test_ok"] is False

        # Wrong credentials: a 407 from the proxy is the proxy's failure, and no secret leaks.
        await api.patch(f"/api/proxies/{good_id}", json={"proxy_password": "wrong-" + PASSWORD})
        refused = await api.post(f"/api/proxies/{good_id}/test", json={"url": url})
        assert (refused.json()["ok"], refused.json()["error_type"]) == (False, "proxy")
        assert PASSWORD not in refused.text

    ok_row, bad_row = await _stored(api, good_id), await _stored(api, bad_id)
    assert (ok_row.success_count, ok_row.failure_count) == (1, 1)
    assert ok_row.last_success_at is not None and ok_row.avg_response_time_ms is not None
    assert (bad_row.success_count, bad_row.failure_count) == (0, 1)
    assert bad_row.last_failure_at is not None
    assert "tested" in await entity_events(_runtime(api).db, "proxy", bad_id)


async def test_mappings_assign_list_enable_remove(api: httpx.AsyncClient) -> None:
    api = api
    domain_id = await _domain(api, "shop.example")
    ids = [(await _create(api, proxy_port=port))["id"] for port in (1001, 1002, 1003)]
    path = f"/api/domains/{domain_id}/proxies"

    first = (await api.post(path, json={"proxy_ids": ids[:2], "priority": 2})).json()
    assert first == {"assigned": ids[:2], "already": [], "unknown": []}
    second = (await api.post(path, json={"proxy_ids": [ids[1], ids[2], 999]})).json()
    assert second == {"assigned": [ids[2]], "already": [ids[1]], "unknown": [999]}

    async with _runtime(api).db.session() as session:
        await session.execute(
            update(DomainProxy)
            .where(DomainProxy.proxy_id == ids[0])
            .values(success_count=3, failure_count=1)
        )
    listed = (await api.get(path)).json()
    assert [m["proxy_id"] for m in listed] == ids  # priority 2 before the default 5
    assert listed[0]["success_rate_percent"] == 75.0
    assert listed[2]["success_rate_percent"] is None
    assert (listed[0]["proxy_port"], listed[0]["priority"], listed[2]["priority"]) == (1001, 2, 5)

    disabled = (await api.post(f"{path}/{ids[0]}/disable")).json()
    assert (disabled["is_active"], disabled["failure_count"]) == (False, 1)
    enabled = (await api.post(f"{path}/{ids[0]}/enable")).json()
    assert (enabled["is_active"], enabled["failure_count"]) == (True, 0)

    assert (await api.delete(f"{path}/{ids[1]}")).status_code == 204
    _problem(await api.delete(f"{path}/{ids[1]}"), 404)
    assert [m["proxy_id"] for m in (await api.get(path)).json()] == [ids[0], ids[2]]

    # Deleting a proxy removes its mappings.
    await api.delete(f"/api/proxies/{ids[2]}")
    assert [m["proxy_id"] for m in (await api.get(path)).json()] == [ids[0]]

    events = await entity_events(_runtime(api).db, "domain", domain_id)
    assert events == [
        "proxies_assigned",
        "proxies_assigned",
        "proxy_mapping_disabled",
        "proxy_mapping_enabled",
        "proxy_removed",
    ]
    for response in (
        await api.get("/api/domains/999/proxies"),
        await api.post("/api/domains/999/proxies", json={"proxy_ids": ids}),
        await api.post(f"/api/domains/999/proxies/{ids[0]}/enable"),
        await api.post(f"{path}/{ids[1]}/enable"),
        await api.delete(f"/api/domains/999/proxies/{ids[0]}"),
    ):
        _problem(response, 404)
    assert _fields(await api.post(path, json={"proxy_ids": [], "priority": 11})) == {
        "proxy_ids",
        "priority",
    }


async def test_health_view_and_alerts(api: httpx.AsyncClient) -> None:
    api = api
    small = await _domain(api, "a-small.example")
    big = await _domain(api, "b-big.example")
    await _domain(api, "c-none.example")  # no mappings: in the view, no alert
    ids = [(await _create(api, proxy_port=port))["id"] for port in range(2001, 2005)]
    await api.post(f"/api/domains/{small}/proxies", json={"proxy_ids": ids[:1]})
    await api.post(f"/api/domains/{big}/proxies", json={"proxy_ids": ids})

    health = (await api.get("/api/proxies/health")).json()
    assert [d["domain_name"] for d in health["domains"]] == [
        "a-small.example",
        "b-big.example",
        "c-none.example",
    ]
    assert [(a["kind"], a["domain_id"]) for a in health["alerts"]] == [
        ("low_active_proxies", small)
    ]

    async with _runtime(api).db.session() as session:
        await session.execute(
            update(DomainProxy)
            .where(DomainProxy.domain_id == big)
            .values(success_count=8, failure_count=2, avg_response_time_ms=50)
        )
        await session.execute(
            update(DomainProxy)
            .where(DomainProxy.domain_id == big, DomainProxy.proxy_id == ids[0])
            .values(failure_count=6)
        )
    health = (await api.get("/api/proxies/health")).json()
    row = health["domains"][1]
    assert row == {
        "domain_id": big,
        "domain_name": "b-big.example",
        "domain_is_active": True,
        "total_proxies": 4,
        "active_proxies": 4,
        "failing_proxies": 1,
        "avg_response_time_ms": 50.0,
        "total_success": 32,
        "total_failures": 12,
        "failure_rate_percent": round(12 * 100 / 44, 2),
    }
    assert health["domains"][2]["total_proxies"] == 0
    assert [(a["kind"], a["domain_id"]) for a in health["alerts"]] == [
        ("low_active_proxies", small),
        ("high_failure_rate", big),
    ]

    # Disabling mappings drops the big domain under three active proxies too.
    for proxy_id in ids[:2]:
        await api.post(f"/api/domains/{big}/proxies/{proxy_id}/disable")
    alerts = (await api.get("/api/proxies/health")).json()["alerts"]
    assert ("low_active_proxies", big) in [(a["kind"], a["domain_id"]) for a in alerts]


def _utc(moment: datetime | None) -> str:
    assert moment is not None
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


async def test_disabled_reason_says_why_and_when_it_is_retested(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    api = api
    runtime = _runtime(api)
    limit = runtime.settings.proxy_failure_limit
    url = site.url("/product/1")
    with TestProxy(fail=True) as bad:
        created = await _create(api, proxy_url="127.0.0.1", proxy_port=bad.port)
        assert (created["disabled_reason"], created["retest_at"]) == (None, None)
        path = f"/api/proxies/{created['id']}"

        # Consecutive failures: enabled until the limit, then disabled by health.
        for _ in range(limit - 1):
            assert (await api.post(f"{path}/test", json={"url": url})).json()["ok"] is False
        assert (await api.get(path)).json()["disabled_reason"] is None
        await api.post(f"{path}/test", json={"url": url})
        shown = (await api.get(path)).json()
        stored = await _stored(api, created["id"])
        assert shown["is_active"] is False and stored.retest_at is not None
        shown_at = stored.last_test_at
        assert shown_at is not None and shown["last_test_ok"] is False
        assert shown["disabled_reason"] == (
            f"failed {limit} times in a row; re-test at {_utc(stored.retest_at)}"
        )
        assert shown["retest_at"] is not None

        # A failed background re-test is counted, and the next one is shown. The app's own
        # scheduler re-tests due proxies too (every 0.2 s here) and may take it first: either
        # way the re-test is counted once (a claimed proxy is re-tested by one caller).
        async with runtime.db.session() as session:
            await session.execute(
                update(Proxy)
                .where(Proxy.id == created["id"])
                .values(retest_at=utcnow() - timedelta(seconds=1))
            )
        settings = runtime.settings.model_copy(update={"proxy_test_url": url})

        async def retested() -> Proxy | None:
            await retest_due(runtime.db, settings, SecretBox(settings), runtime.fetchers)
            stored = await _stored(api, created["id"])
            return stored if stored.retest_count == 1 else None

        stored = await eventually(retested, "the failed re-test to be counted")
        assert stored.last_test_ok is False and stored.last_test_at is not None
        assert stored.last_test_at > shown_at
        listed = (await api.get("/api/proxies", params={"is_active": False})).json()["items"]
        assert [p["disabled_reason"] for p in listed] == [
            f"failed {limit} times in a row, then 1 failed re-test; "
            f"re-test at {_utc(stored.retest_at)}"
        ]

        # Enabled again: no reason; an operator's disable says so, and has no re-test.
        enabled = (await api.post(f"{path}/enable")).json()
        assert (enabled["is_active"], enabled["disabled_reason"], enabled["retest_at"]) == (
            True,
            None,
            None,
        )
        disabled = (await api.post(f"{path}/disable")).json()
        assert (disabled["disabled_reason"], disabled["retest_at"]) == (
            "disabled by an operator",
            None,
        )
        # Failures of a proxy the operator disabled do not make it an automatic disable.
        for _ in range(limit):
            await api.post(f"{path}/test", json={"url": url})
        assert (await api.get(path)).json()["disabled_reason"] == "disabled by an operator"
    again = (await api.post(f"{path}/enable")).json()
    assert (again["is_active"], again["disabled_reason"]) == (True, None)


async def test_a_proxy_at_a_link_local_or_metadata_address_is_refused(
    api: httpx.AsyncClient,
) -> None:
    for host in ("169.254.169.254", "fe80::1", "100.100.100.200", "::ffff:169.254.169.254"):
        body = {"proxy_url": host, "proxy_port": 3128}
        assert _fields(await api.post("/api/proxies", json=body)) == {"proxy_url"}, host
    bulk = await api.post(
        "/api/proxies/bulk", json={"lines": "http://169.254.169.254:3128\nhttp://10.0.0.7:3128"}
    )
    assert bulk.status_code == 200, bulk.text
    [metadata, private] = bulk.json()["results"]
    assert metadata["result"] == "invalid" and "link-local" in metadata["error"]
    assert private["result"] == "created"  # a proxy may be private: it is the operator's own
    moved = await api.patch(
        f"/api/proxies/{private['proxy_id']}", json={"proxy_url": "169.254.169.254"}
    )
    assert _fields(moved) == {"proxy_url"}
