"""The agents API over the real app, on SQLite and PostgreSQL: tokens, roles, lifecycle, events."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select, text, update

from forager.agents import admin
from forager.api.deps import Runtime
from forager.db.models import Agent
from tests.support.waiting import entity_events


def _runtime(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    return body


async def _create(api: httpx.AsyncClient, name: str = "home-1") -> dict[str, Any]:
    response = await api.post("/api/agents", json={"name": name})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_create_shows_the_token_once_and_stores_only_its_hash(api: httpx.AsyncClient) -> None:
    created = await _create(api)
    token = created["token"]
    assert len(token) >= 32
    assert created["status"] == "disconnected"
    assert created["token_prefix"] == token[:8]
    # Never again: not in get, not in list.
    got = await api.get(f"/api/agents/{created['id']}")
    assert got.status_code == 200
    assert "token" not in got.json()
    assert token not in got.text
    listed = await api.get("/api/agents")
    assert listed.json()["total"] == 1
    assert token not in listed.text
    # The database holds the hash, never the token (checked on the raw rows).
    async with _runtime(api).db.reader() as session:
        raw = [tuple(r) for r in (await session.execute(text("SELECT * FROM agents"))).all()]
        stored = await session.scalar(select(Agent).where(Agent.id == created["id"]))
    assert stored is not None and stored.token_hash == admin.hash_token(token)
    assert all(token not in str(value) for row in raw for value in row)
    # Two agents never share a token.
    other = await _create(api, "home-2")
    assert other["token"] != token
    assert await admin.authenticate(_runtime(api).db, token) is not None
    assert await entity_events(_runtime(api).db, "agent", created["id"]) == ["created"]


async def test_bad_names_and_duplicates_are_refused(api: httpx.AsyncClient) -> None:
    for name in ["", "x" * 101, "bad/name", " leading", "trailing ", "tab\tname"]:
        response = await api.post("/api/agents", json={"name": name})
        assert _problem(response, 422)["errors"][0]["field"] == "name", name
    await _create(api, "Home 1 - Vivo")
    _problem(await api.post("/api/agents", json={"name": "Home 1 - Vivo"}), 409)
    _problem(await api.post("/api/agents", json={"name": "ok", "token": "mine"}), 422)
    _problem(await api.get("/api/agents/999"), 404)
    _problem(await api.get("/api/agents?status=sleeping"), 422)


async def test_read_keys_list_and_get_but_cannot_change(api: httpx.AsyncClient) -> None:
    created = await _create(api)
    read = {"Authorization": f"Bearer {api.keys['read']}"}  # type: ignore[attr-defined]
    assert (await api.get("/api/agents", headers=read)).status_code == 200
    assert (await api.get(f"/api/agents/{created['id']}", headers=read)).status_code == 200
    for path in ["", f"/{created['id']}/revoke", f"/{created['id']}/rotate-token"]:
        _problem(await api.post(f"/api/agents{path}", json={"name": "x"}, headers=read), 403)
    _problem(await api.get("/api/agents", headers={"Authorization": "Bearer nope"}), 401)
    # An agent token is not an API key.
    agent = {"Authorization": f"Bearer {created['token']}"}
    _problem(await api.get("/api/agents", headers=agent), 401)


async def test_revoke_rotate_and_reset_follow_the_lifecycle(api: httpx.AsyncClient) -> None:
    db = _runtime(api).db
    created = await _create(api)
    agent_id = created["id"]

    rotated = await api.post(f"/api/agents/{agent_id}/rotate-token")
    assert rotated.status_code == 200
    new_token = rotated.json()["token"]
    assert new_token != created["token"]
    assert await admin.authenticate(db, created["token"]) is None
    assert await admin.authenticate(db, new_token) is not None

    # Only a blocked agent can be reset; a blocked one goes back to connected.
    problem = _problem(await api.post(f"/api/agents/{agent_id}/reset"), 409)
    assert problem["current_status"] == "disconnected"
    async with db.session() as session:
        await session.execute(
            update(Agent).where(Agent.id == agent_id).values(status="blocked", blocked_reason="x")
        )
    reset = await api.post(f"/api/agents/{agent_id}/reset")
    assert reset.status_code == 200, reset.text
    assert reset.json()["status"] == "connected"
    assert reset.json()["blocked_reason"] is None

    revoked = await api.post(f"/api/agents/{agent_id}/revoke")
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    assert revoked.json()["status"] == "disconnected"
    assert await admin.authenticate(db, new_token) is None
    _problem(await api.post(f"/api/agents/{agent_id}/revoke"), 409)
    _problem(await api.post(f"/api/agents/{agent_id}/rotate-token"), 409)
    filtered = await api.get("/api/agents?status=disconnected")
    assert [a["id"] for a in filtered.json()["items"]] == [agent_id]

    assert await entity_events(_runtime(api).db, "agent", agent_id) == [
        "created",
        "token_rotated",
        "reset",
        "revoked",
    ]


async def test_agent_operations_are_in_the_openapi_document(api: httpx.AsyncClient) -> None:
    spec = (await api.get("/openapi.json")).json()
    ops = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    assert {
        "create_agent",
        "list_agents",
        "get_agent",
        "revoke_agent",
        "rotate_agent_token",
        "reset_agent",
    } <= ops
