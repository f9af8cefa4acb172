"""The reference services themselves: the worker's sessions really use their proxy and its
results are served from storage only; the writer writes only what its allow-list takes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from forager.db.engine import Database
from forager.db.models import Ad
from forager.missions.reference import worker_app, writer_app
from forager.missions.reference.tables import reflect
from tests.missions.badservice import BadService
from tests.support.proxy import TestProxy
from tests.support.site import TestSite

KEY = {"x-api-key": "k"}


async def _until(client: httpx.AsyncClient, path: str, done: set[str]) -> dict[str, Any]:
    async with asyncio.timeout(60):
        while True:
            body: dict[str, Any] = (await client.get(path, headers=KEY)).json()
            if body["status"] in done:
                return body
            await asyncio.sleep(0.02)


@pytest.fixture
async def worker(site: TestSite, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = worker_app.create_app(api_key="k", target=site.url(), storage=tmp_path, timeout=5)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://worker.test"
        ) as client,
    ):
        yield client


async def test_the_worker_scrapes_through_its_session_proxy(
    worker: httpx.AsyncClient, site: TestSite
) -> None:
    site.set_ads(per_day=30)
    assert (await worker.post("/session", json={})).status_code == 401
    assert (await worker.get("/health")).json() == {"status": "healthy"}
    early = await worker.post(
        "/scrape",
        json={"filters": {"date_range": {"start": "2026-01-01", "end": "2026-01-01"}}},
        headers=KEY,
    )
    assert early.status_code == 409  # no session yet
    with TestProxy(username="u", password="p w") as proxy:
        body = {
            "force_refresh": True,
            "proxy": {"server": f"127.0.0.1:{proxy.port}", "username": "u", "password": "p w"},
        }
        assert (await worker.post("/session", json=body, headers=KEY)).status_code == 200
        assert (await _until(worker, "/session/status", {"ready", "disconnected"}))["status"] == (
            "ready"
        )
        scrape = {
            "filters": {
                "date_range": {"start": "2026-01-01", "end": "2026-01-02"},
                "format": "video",
                "sort_by": "qtd_ads",
                "languages": ["pt", "en"],
            },
            "options": {"max_ads": "all", "batch_size": 150},
        }
        job_id = (await worker.post("/scrape", json=scrape, headers=KEY)).json()["job_id"]
        job = await _until(worker, f"/scrape/{job_id}", {"completed", "failed", "empty"})
        ads_requests = [r for r in proxy.requests if "/ads?" in r]
    assert job["status"] == "completed" and job["progress_pct"] == 100
    # 2 days x 30 ads, half of them videos, two languages out of three: 20 ads, one page.
    assert job["ads_count"] == 20 and len(ads_requests) == 1
    stored = await worker.get(f"/storage/{job_id}/{job_id}_results.json")
    ads = stored.json()["ads"]
    assert len(ads) == 20 and {a["media_type"] for a in ads} == {"video"}
    assert {a["language"] for a in ads} <= {"pt", "en"}
    assert [a["qtd_ads"] for a in ads] == sorted((a["qtd_ads"] for a in ads), reverse=True)
    for path in (f"/storage/{job_id}/../../etc", f"/storage/..%2F{job_id}/x", "/storage/a/b"):
        assert (await worker.get(path)).status_code in (401, 404)  # never a file
    assert (await worker.post("/faults", json={}, headers=KEY)).status_code in (404, 405)
    assert (await worker.delete("/session", headers=KEY)).json() == {"status": "terminated"}
    assert (await worker.get("/session/status", headers=KEY)).json() == {"status": "terminated"}


async def test_a_dead_proxy_leaves_the_session_disconnected(worker: httpx.AsyncClient) -> None:
    with TestProxy(fail=True) as proxy:
        body = {"proxy": {"server": f"http://127.0.0.1:{proxy.port}"}}
        await worker.post("/session", json=body, headers=KEY)
        status = await _until(worker, "/session/status", {"ready", "disconnected"})
    assert status["status"] == "disconnected"


@pytest.fixture
async def writer(db: Database) -> AsyncIterator[httpx.AsyncClient]:
    tables = await reflect(db.engine, ["ads"])
    app = writer_app.create_app(api_key="k", db=db, tables=tables, batch_size=2)
    app.router.lifespan_context = None  # type: ignore[assignment]  # the test owns the db
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://writer.test"
    ) as client:
        yield client


def _process(url: str, **config: str) -> dict[str, Any]:
    return {
        "config": {
            "table": "ads",
            "schema": "public",
            "operation": "upsert",
            "conflict_key": "id",
            **config,
        },
        "source": {"type": "url", "url": url, "json_path": "data.ads"},
    }


async def test_the_writer_refuses_what_its_allow_list_does_not_take(
    writer: httpx.AsyncClient,
) -> None:
    assert (await writer.post("/process", json=_process("http://x"))).status_code == 401
    assert (await writer.get("/health")).json() == {"status": "healthy"}
    for config, word in (
        ({"table": "api_keys"}, "table 'api_keys' is not allowed"),
        ({"table": "ads; DROP TABLE ads"}, "is not allowed"),
        ({"schema": "pg_catalog"}, "schema 'pg_catalog' is not allowed"),
        ({"conflict_key": "body"}, "conflict_key 'body' is not a unique column"),
    ):
        refused = await writer.post("/process", json=_process("http://x", **config), headers=KEY)
        assert refused.status_code == 400 and word in refused.json()["detail"], refused.text
    assert (await writer.get("/status/nope", headers=KEY)).status_code == 404


async def test_the_writer_upserts_in_batches_and_reports_failed_items(
    writer: httpx.AsyncClient, db: Database
) -> None:
    good = [
        {"id": f"ad-{n}", "page_name": f"P{n}", "qtd_ads": n, "start_date": f"2026-01-0{n}"}
        for n in range(1, 6)
    ]
    bad = [
        {"id": "ad-evil", "evil": "x"},  # a column outside the table
        {"id": "ad-count", "qtd_ads": "lots"},  # not an integer
        {"id": "x" * 150},  # longer than ads.id
    ]
    with BadService() as source:
        source.document = {"data": {"ads": good[:3] + bad + good[3:]}}
        body = {**_process(f"{source.url}/storage/j/j_results.json"), "job_id": "job-1"}
        job_id = (await writer.post("/process", json=body, headers=KEY)).json()["job_id"]
        done = await _until(writer, f"/status/{job_id}", {"completed", "partial", "failed"})
        assert done["status"] == "partial"
        assert done["progress"] == {
            "total": 8,
            "processed": 8,
            "success_count": 5,
            "failed_count": 3,
        }
        errors = {i["index"]: i["error"] for i in done["failed_items"]}
        assert errors[3] == "column 'evil' is not allowed in ads"
        assert "qtd_ads: not an integer" in errors[4]
        assert "longer than 100" in errors[5]
        # The same job id again is the same job; another document with it is refused.
        again = await writer.post("/process", json=body, headers=KEY)
        assert again.json()["job_id"] == "job-1"
        other = {**body, "source": {**body["source"], "url": f"{source.url}/other"}}
        assert (await writer.post("/process", json=other, headers=KEY)).status_code == 409
        # An upsert: a second job with changed values updates, never duplicates.
        source.document = {"data": {"ads": [{**good[0], "page_name": "Renamed"}]}}
        second = (
            await writer.post(
                "/process", json=_process(f"{source.url}/storage/k/k.json"), headers=KEY
            )
        ).json()["job_id"]
        assert (await _until(writer, f"/status/{second}", {"completed", "failed"}))[
            "status"
        ] == "completed"
    async with db.reader() as session:
        count = await session.scalar(select(func.count()).select_from(Ad))
        first = await session.get(Ad, "ad-1")
    assert count == 5 and first is not None and first.page_name == "Renamed"
    assert str(first.start_date) == "2026-01-01" and first.qtd_ads == 1


def test_the_service_commands_refuse_bad_setups_in_one_line(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "FORAGER_SERVICE_API_KEY"}
    env |= {
        "FORAGER_DATA_DIR": str(tmp_path / "data"),
        "FORAGER_DATABASE_URL": f"sqlite:///{tmp_path / 'f.db'}",
    }
    no_key = subprocess.run(
        [sys.executable, "-m", "forager.cli", "worker-service", "--target", "http://x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert no_key.returncode == 1
    assert no_key.stderr.strip().splitlines() == [
        "error: FORAGER_SERVICE_API_KEY must hold the API key callers send as x-api-key"
    ]
    no_table = subprocess.run(
        [sys.executable, "-m", "forager.cli", "writer-service", "--table", "nope"],
        env={**env, "FORAGER_SERVICE_API_KEY": "k"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert no_table.returncode == 1
    assert no_table.stderr.strip().splitlines()[-1] == (
        "error: table 'nope' does not exist in the writer's database"
    )
