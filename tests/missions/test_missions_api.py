"""The operator's API: missions, Mission Control, worker services and writers — validation,
secrets, lifecycle refusals, the §10.3 reports. On both engines, on the real app."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select

from forager.crypto import SecretBox
from forager.db.models import WorkerService
from forager.missions.codes import MissionFailure
from forager.missions.dataurl import data_url
from tests.missions.badservice import BadService
from tests.missions.fleet import API_KEY

SECRET = "wk-secret-never-shown-123"


def _db(api: httpx.AsyncClient) -> Any:
    return api.app.state.runtime.db  # type: ignore[attr-defined]


async def _create(api: httpx.AsyncClient, **body: Any) -> httpx.Response:
    values = {"date_start": "2026-02-01", "date_end": "2026-02-01", "languages": ["pt"], **body}
    return await api.post("/api/missions", json=values)


async def test_a_mission_range_and_its_values_are_checked(api: httpx.AsyncClient) -> None:
    for body, field in (
        ({"date_end": "2026-01-31"}, "date_end"),  # before the start
        ({"date_end": "2026-06-01"}, "date_end"),  # over the 31-day span
        ({"languages": ["pt", "klingon"]}, "languages.1"),
        ({"languages": []}, "languages"),
        ({"media_type": "gif"}, "media_type"),
    ):
        refused = await _create(api, **body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["field"] == field
    assert (await api.get("/api/missions")).json()["total"] == 0  # nothing half-created


async def test_create_split_queue_list_cancel(api: httpx.AsyncClient) -> None:
    created = await _create(api, date_end="2026-02-03", split_by_day=True, media_type="video")
    assert created.status_code == 201
    missions = created.json()["missions"]
    assert [(m["date_start"], m["date_end"], m["status"]) for m in missions] == [
        (f"2026-02-0{d}", f"2026-02-0{d}", "draft") for d in (1, 2, 3)
    ]
    ids = [m["id"] for m in missions]
    queued = (await api.post("/api/missions/queue", json={"mission_ids": [*ids[:2], 999]})).json()
    assert queued == {"queued": ids[:2], "refused": [{"id": 999, "current_status": "missing"}]}
    again = (await api.post("/api/missions/queue", json={"mission_ids": [ids[0]]})).json()
    assert again["refused"] == [{"id": ids[0], "current_status": "queued"}]
    listed = (await api.get("/api/missions", params={"status": "queued"})).json()
    assert [m["id"] for m in listed["items"]] == ids[1::-1]  # newest first
    assert [m["checkpoint"] for m in listed["items"]] == ["atribuido"] * 2
    in_range = (await api.get("/api/missions", params={"date_from": "2026-02-03"})).json()
    assert [m["id"] for m in in_range["items"]] == [ids[2]]
    canceled = await api.post(f"/api/missions/{ids[0]}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
    refused = await api.post(f"/api/missions/{ids[0]}/cancel")
    assert refused.status_code == 409 and refused.json()["current_status"] == "canceled"
    draft = await api.post(f"/api/missions/{ids[2]}/cancel")
    assert draft.status_code == 409 and draft.json()["current_status"] == "draft"
    timeline = (await api.get(f"/api/missions/{ids[0]}/timeline")).json()
    assert [e["event"] for e in timeline] == ["mission_queued", "mission_canceled"]
    assert timeline[0]["details"] == {"queued_by": "test-admin"}
    assert timeline[1]["details"] == {
        "canceled_by": "test-admin",
        "previous_checkpoint": "atribuido",
    }
    # A canceled mission may be queued again, from scratch.
    requeued = (await api.post("/api/missions/queue", json={"mission_ids": [ids[0]]})).json()
    assert requeued["queued"] == [ids[0]]
    assert (await api.get("/api/missions/0")).status_code == 422
    assert (await api.get("/api/missions/12345")).status_code == 404


async def test_worker_service_keys_are_encrypted_and_never_returned(
    api: httpx.AsyncClient,
) -> None:
    body = {
        "name": "w1",
        "url": "http://127.0.0.1:9",
        "api_key": SECRET,
        "storage_domain": "storage.example.com/bucket",
    }
    created = await api.post("/api/worker-services", json=body)
    assert created.status_code == 201, created.text
    service = created.json()
    assert service["api_key_set"] is True and SECRET not in created.text
    assert service["status"] == "idle"
    for answer in (
        await api.get("/api/worker-services"),
        await api.get(f"/api/worker-services/{service['id']}"),
        await api.get("/api/missions/control"),
        await api.get("/api/events", params={"entity_type": "worker_service"}),
        await api.patch(f"/api/worker-services/{service['id']}", json={"api_key": SECRET + "2"}),
    ):
        assert answer.status_code == 200 and SECRET not in answer.text
    async with _db(api).reader() as session:
        row = await session.scalar(select(WorkerService))
    assert row is not None and SECRET not in row.api_key
    box = SecretBox(api.app.state.runtime.settings)  # type: ignore[attr-defined]
    assert box.decrypt(row.api_key) == SECRET + "2"
    taken = await api.post("/api/worker-services", json=body)
    assert taken.status_code == 409
    for bad in (
        {"url": "ftp://x"},
        {"url": "http://user:pw@host"},
        {"storage_domain": "../etc"},
        {"storage_domain": "http://a@b"},
        {"name": None},
        {"api_key": "clé-secrète"},  # sent as a header: printable ASCII only (was a 500)
        {"api_key": " padded"},
    ):
        refused = await api.patch(f"/api/worker-services/{service['id']}", json=bad)
        assert refused.status_code == 422, (bad, refused.text)
        assert "secrète" not in refused.text
    writer = await api.post(
        "/api/writers", json={"name": "wr", "url": "http://127.0.0.1:9", "api_key": SECRET}
    )
    assert writer.status_code == 201 and SECRET not in writer.text
    assert (await api.delete(f"/api/writers/{writer.json()['id']}")).status_code == 204
    assert (await api.delete(f"/api/worker-services/{service['id']}")).status_code == 204


async def test_test_connection_says_whether_the_key_is_accepted(api: httpx.AsyncClient) -> None:
    with BadService() as service:
        for path, key in (("/api/worker-services", API_KEY), ("/api/writers", "wrong")):
            made = await api.post(path, json={"name": "t", "url": service.url, "api_key": key})
            tested = await api.post(f"{path}/{made.json()['id']}/test")
            assert tested.status_code == 200 and tested.json()["ok"] is True, tested.text
            got = (await api.get(f"{path}/{made.json()['id']}")).json()
            assert got["last_test_ok"] is True and got["last_test_at"]
        service.behave["GET /status/{id}"] = "500"
        writer = (await api.get("/api/writers")).json()["items"][0]
        failed = (await api.post(f"/api/writers/{writer['id']}/test")).json()
        assert failed["ok"] is False and "500" in failed["detail"]
    gone = (await api.post("/api/worker-services/1/test")).json()
    assert gone["ok"] is False and "cannot connect" in gone["detail"]


async def test_settings_and_the_run_switch(api: httpx.AsyncClient) -> None:
    assert (await api.get("/api/missions/settings")).json() == {
        "session_limit": 5,
        "max_retries": 2,
    }
    changed = await api.patch("/api/missions/settings", json={"session_limit": 3})
    assert changed.json() == {"session_limit": 3, "max_retries": 2}
    assert (await api.patch("/api/missions/settings", json={"max_retries": -1})).status_code == 422
    # Start with nothing to run is refused, saying what to configure, and starts nothing.
    for missing in ("no mission is queued", "no active worker service", "no active writer"):
        refused = await api.post("/api/missions/control/start")
        assert refused.status_code == 409, refused.text
        assert missing in refused.json()["detail"]
        assert (await api.get("/api/missions/control")).json()["run_requested"] is False
        if missing == "no mission is queued":
            assert "POST /api/missions with queue: true" in refused.json()["detail"]
            assert (await _create(api, queue=True)).status_code == 201
        else:
            path = "/api/worker-services" if "worker" in missing else "/api/writers"
            assert f"POST {path}" in refused.json()["detail"]
            made = await api.post(
                path, json={"name": "w", "url": "http://127.0.0.1:9", "api_key": "k" * 16}
            )
            assert made.status_code == 201, made.text
    started = (await api.post("/api/missions/control/start")).json()
    assert started["run_requested"] is True and started["session_limit"] == 3
    stopped = (await api.post("/api/missions/control/stop")).json()
    assert stopped["run_requested"] is False
    read_key = {"Authorization": f"Bearer {api.keys['read']}"}  # type: ignore[attr-defined]
    assert (await api.post("/api/missions/control/start", headers=read_key)).status_code == 403
    for report in ("failures", "performance", "proxies"):
        answer = await api.get(f"/api/missions/{report}")
        assert answer.status_code == 200 and answer.json() == [], report


def test_the_data_url_stays_inside_the_storage() -> None:
    assert data_url("storage.example.com", "scrape_3c434995") == (
        "https://storage.example.com/scrape_3c434995/scrape_3c434995_results.json"
    )
    assert data_url("http://127.0.0.1:8081/storage/", "job-1") == (
        "http://127.0.0.1:8081/storage/job-1/job-1_results.json"
    )
    for job in ("../x", "a/b", "a@b", "..", "", "x" * 101, "a%2Fb", "a b", "a\\b"):
        with pytest.raises(MissionFailure) as refused:
            data_url("storage.example.com", job)
        assert refused.value.code == "ERROR400", job
    for storage in (None, "", "ftp://x", "http://u:p@host", "host/../etc", "host?x=1"):
        with pytest.raises(MissionFailure) as refused:
            data_url(storage, "job")
        assert refused.value.code == "ERROR401", storage
