"""Fetch-policy settings through the domains and proxies API, and breakers in /health and
/metrics, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import update

from forager.db.models import Domain, Proxy
from forager.db.types import utcnow


def _fields(response: httpx.Response) -> set[str]:
    assert response.status_code == 422, response.text
    return {e["field"] for e in response.json()["errors"]}


async def _create(api: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    response = await api.post("/api/domains", json={"domain_name": "shop.example", **fields})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_domain_fetch_policy_settings(api: httpx.AsyncClient) -> None:
    created = await _create(api)
    assert (
        created["proxy_strategy"],
        created["use_global_pool"],
        created["required_country_code"],
        created["ignore_robots"],
        created["proxy_rate_limit_rps"],
        created["breaker_state"],
    ) == ("lru", False, None, False, None, "closed")
    url = f"/api/domains/{created['id']}"
    changed = await api.patch(
        url,
        json={
            "proxy_strategy": "exclusive",
            "use_global_pool": True,
            "required_country_code": "br",
            "ignore_robots": True,
            "proxy_rate_limit_rps": 2.5,
        },
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert (
        body["proxy_strategy"],
        body["use_global_pool"],
        body["required_country_code"],
        body["ignore_robots"],
        body["proxy_rate_limit_rps"],
    ) == ("exclusive", True, "BR", True, 2.5)
    # Empty country and a zero rate clear them.
    cleared = (
        await api.patch(url, json={"required_country_code": "", "proxy_rate_limit_rps": 0})
    ).json()
    assert (cleared["required_country_code"], cleared["proxy_rate_limit_rps"]) == (None, None)
    assert (await api.get(url)).json()["proxy_strategy"] == "exclusive"


async def test_domain_fetch_policy_validation_names_the_field(api: httpx.AsyncClient) -> None:
    created = await _create(api)
    url = f"/api/domains/{created['id']}"
    for body, field in (
        ({"proxy_strategy": "round-robin"}, "proxy_strategy"),
        ({"required_country_code": "BRA"}, "required_country_code"),
        ({"required_country_code": "1x"}, "required_country_code"),
        ({"proxy_rate_limit_rps": -1}, "proxy_rate_limit_rps"),
        ({"proxy_rate_limit_rps": "fast"}, "proxy_rate_limit_rps"),
        ({"ignore_robots": "maybe"}, "ignore_robots"),
        ({"use_global_pool": None}, "use_global_pool"),
    ):
        assert _fields(await api.patch(url, json=body)) == {field}, body
    assert _fields(
        await api.post("/api/domains", json={"domain_name": "b.example", "proxy_strategy": 3})
    ) == {"proxy_strategy"}
    assert (await api.get(url)).json()["proxy_strategy"] == "lru"  # nothing changed


async def test_proxy_country_code_through_the_api(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/api/proxies", json={"proxy_url": "p1.example", "proxy_port": 8080, "country_code": "de"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["country_code"] == "DE"
    bad = await api.post(
        "/api/proxies", json={"proxy_url": "p2.example", "proxy_port": 8080, "country_code": "DEU"}
    )
    assert _fields(bad) == {"country_code"}


async def test_open_breakers_show_in_health_and_metrics(api: httpx.AsyncClient) -> None:
    domain = await _create(api)
    proxy = (
        await api.post("/api/proxies", json={"proxy_url": "p1.example", "proxy_port": 3128})
    ).json()
    healthy = (await api.get("/health")).json()
    assert healthy["circuit_breakers"] == []
    # The seed's HealthStatus lists every breaker, closed ones too, with its kind and statistics.
    listed = {(b["kind"], b["entity_id"]): b for b in healthy["errors"]["circuit_breakers"]}
    assert listed.keys() == {("domain", domain["id"]), ("proxy", proxy["id"])}
    assert {b["state"] for b in listed.values()} == {"closed"}
    assert listed["domain", domain["id"]]["total_calls"] == 0
    assert "total_rejections" not in listed["proxy", proxy["id"]]  # monitors only
    runtime = api.app.state.runtime  # type: ignore[attr-defined]
    async with runtime.db.session() as session:
        await session.execute(
            update(Domain)
            .where(Domain.id == domain["id"])
            .values(breaker_state="open", breaker_failures=5, breaker_opened_at=utcnow())
        )
        await session.execute(
            update(Proxy)
            .where(Proxy.id == proxy["id"])
            .values(breaker_state="half_open", breaker_failures=0, breaker_successes=2)
        )
    body = (await api.get("/health")).json()
    seen = {(b["kind"], b["name"], b["state"]) for b in body["circuit_breakers"]}
    assert seen == {("domain", "shop.example", "open"), ("proxy", "p1.example:3128", "half_open")}
    assert seen == {(b["kind"], b["name"], b["state"]) for b in body["errors"]["circuit_breakers"]}
    metrics = (await api.get("/metrics")).text
    assert 'forager_circuit_breakers{kind="domain",state="open"} 1' in metrics
    assert 'forager_circuit_breakers{kind="proxy",state="half_open"} 1' in metrics
    assert 'forager_circuit_breakers{kind="domain",state="closed"} 0' in metrics
    # /metrics is open: breakers are named by id, never by host or port.
    assert f'forager_circuit_breaker_state{{kind="domain",id="{domain["id"]}"}} 1' in metrics
    assert f'forager_circuit_breaker_state{{kind="proxy",id="{proxy["id"]}"}} 2' in metrics
    assert "p1.example" not in metrics and "shop.example" not in metrics


async def test_assigning_a_pool_proxy_makes_it_a_mapping(api: httpx.AsyncClient) -> None:
    from forager.proxies.selection import DomainPolicy, choose_proxy

    domain = await _create(api, use_global_pool=True)
    ids = [
        (
            await api.post("/api/proxies", json={"proxy_url": f"p{n}.example", "proxy_port": 80})
        ).json()["id"]
        for n in range(2)
    ]
    runtime = api.app.state.runtime  # type: ignore[attr-defined]
    policy = DomainPolicy(domain["id"], use_global_pool=True)
    for _ in range(2):  # both pool proxies used once: each gets a pool row for this domain
        async with runtime.db.session() as session:
            await choose_proxy(session, policy, runtime.settings, None, owner="t")
    listed = (await api.get(f"/api/domains/{domain['id']}/proxies")).json()
    rows = listed["items"] if isinstance(listed, dict) else listed
    assert {(m["proxy_id"], m["source"]) for m in rows} == {(ids[0], "pool"), (ids[1], "pool")}
    response = await api.post(f"/api/domains/{domain['id']}/proxies", json={"proxy_ids": ids[:1]})
    assert response.status_code == 200, response.text
    assert response.json()["assigned"] == ids[:1]
    listed = (await api.get(f"/api/domains/{domain['id']}/proxies")).json()
    rows = listed["items"] if isinstance(listed, dict) else listed
    assert {(m["proxy_id"], m["source"]) for m in rows} == {(ids[0], "admin"), (ids[1], "pool")}
    for _ in range(3):  # now mapped: only the assigned proxy, pool or not
        async with runtime.db.session() as session:
            choice = await choose_proxy(session, policy, runtime.settings, None, owner="t")
        assert choice is not None and choice.proxy_id == ids[0]
