"""API keys: every /api route needs one, read keys cannot change anything, keys are never stored."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from forager.db.models import ApiKey, Event
from tests.support.cli import Ran
from tests.support.cli import forager as run_forager


def _keys(api: httpx.AsyncClient) -> dict[str, str]:
    keys: dict[str, str] = api.keys  # type: ignore[attr-defined]
    return keys


def _with_key(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/tasks"),
        ("POST", "/api/tasks"),
        ("GET", "/api/products"),
        ("GET", "/api/domains"),
        ("GET", "/api/proxies"),
        ("POST", "/api/tasks/1/pause"),
    ],
)
async def test_missing_or_wrong_key_is_401(api: httpx.AsyncClient, method: str, path: str) -> None:
    for headers in ({"Authorization": ""}, _with_key("fgr_wrong"), {"Authorization": "Basic eA=="}):
        response = await api.request(method, path, headers=headers, json={"url": "https://e.com/"})
        assert response.status_code == 401, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.headers["www-authenticate"] == "Bearer"
    assert (await api.get("/api/tasks")).json()["total"] == 0  # nothing was written


async def test_read_key_reads_but_cannot_change(api: httpx.AsyncClient) -> None:
    read = _with_key(_keys(api)["read"])
    created = await api.post("/api/tasks", json={"url": "https://shop.example/p/1"})
    task_id = created.json()["task"]["id"]
    assert (await api.get("/api/tasks", headers=read)).status_code == 200
    assert (await api.get(f"/api/tasks/{task_id}", headers=read)).status_code == 200
    for method, path, body in [
        ("POST", "/api/tasks", {"url": "https://shop.example/p/2"}),
        ("POST", f"/api/tasks/{task_id}/pause", None),
        ("PATCH", f"/api/tasks/{task_id}/priority", {"priority": 1}),
        ("POST", "/api/domains", {"domain_name": "x.example"}),
    ]:
        response = await api.request(method, path, headers=read, json=body)
        assert response.status_code == 403, response.text
        assert "read-only" in response.json()["detail"]
    task = (await api.get(f"/api/tasks/{task_id}")).json()
    assert (task["status"], task["priority"]) == ("pending", 5)
    assert (await api.get("/api/tasks")).json()["total"] == 1


async def test_health_and_metrics_are_open(api: httpx.AsyncClient) -> None:
    for path in ("/health", "/metrics"):
        assert (await api.get(path, headers={"Authorization": ""})).status_code == 200


async def test_only_hashes_are_stored_and_revoked_keys_stop_working(
    api: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    from forager.apikeys import revoke_key

    runtime = api.app.state.runtime  # type: ignore[attr-defined]
    admin = _keys(api)["admin"]
    async with runtime.db.reader() as session:
        rows = list(await session.scalars(select(ApiKey)))
        events = [str(e.details) for e in await session.scalars(select(Event))]
    assert {r.name for r in rows} == {"test-admin", "test-read"}
    for row in rows:
        assert row.key_hash != admin and len(row.key_hash) == 64
        assert admin not in (row.key_prefix * 10)
    assert all(admin not in text for text in events)
    await revoke_key(runtime.db, "test-read")
    response = await api.get("/api/tasks", headers=_with_key(_keys(api)["read"]))
    assert response.status_code == 401
    assert admin not in caplog.text


def test_cli_creates_lists_and_revokes_keys(tmp_path: Path, cli_env: dict[str, str]) -> None:
    def forager(*args: str) -> Ran:
        return run_forager(tmp_path, cli_env, *args)

    assert forager("db", "upgrade").returncode == 0  # the command makes no database itself
    created = forager("apikey", "create", "--name", "ops", "--role", "admin")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("fgr_") and len(key) > 40
    assert "shown only now" in created.stderr
    listed = forager("apikey", "list")
    assert "ops\tadmin\tfgr_" in listed.stdout
    assert key not in listed.stdout
    again = forager("apikey", "create", "--name", "ops", "--role", "admin")
    assert again.returncode == 1
    assert "exists" in again.stderr
    bad_role = forager("apikey", "create", "--name", "x", "--role", "root")
    assert (bad_role.returncode, "role must be one of admin, read" in bad_role.stderr) == (1, True)
    assert forager("apikey", "revoke", "ops").returncode == 0
    assert "revoked" in forager("apikey", "list").stdout
    assert forager("apikey", "revoke", "ops").returncode == 1


async def test_oversized_bodies_are_refused_with_413(api: httpx.AsyncClient) -> None:
    limit = api.app.state.runtime.settings.max_request_bytes  # type: ignore[attr-defined]
    urls = [f"https://shop.example/p/{n}?pad={'x' * 900}" for n in range(limit // 900 + 10)]
    response = await api.post("/api/tasks/batch", json={"urls": urls})
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert str(limit) in response.json()["detail"]

    async def chunks():  # no Content-Length: counted as it arrives
        yield b'{"urls": ["'
        for _ in range(limit // 1000 + 10):
            yield b"x" * 1000
        yield b'"]}'

    streamed = await api.post(
        "/api/tasks/batch", content=chunks(), headers={"content-type": "application/json"}
    )
    assert streamed.status_code == 413
    assert (await api.get("/api/tasks")).json()["total"] == 0
