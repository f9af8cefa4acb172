"""``/api/jobs`` (issue 32) on both engines: start a crawl job, read its progress, pause, resume
and cancel it; bad input is a 422 naming the field (the crawl itself: tests/test_discovery.py)."""

from __future__ import annotations

from typing import Any

from tests.support.crawling import crawl
from tests.support.site import TestSite


async def test_a_job_is_started_followed_and_controlled(api: Any, site: TestSite) -> None:
    body = {
        "name": "shop",
        "start_urls": [site.url("/shop/")],
        "sitemap_urls": [site.url("/shop/sitemap.xml")],
        "rules": [{"pattern": "/shop/p/", "action": "parse"}],
        "max_pages": 50,
    }
    started = await api.post("/api/jobs", json=body)
    assert started.status_code == 201, started.text
    job = started.json()
    assert job["status"] == "running"
    assert job["hosts"] == ["127.0.0.1"]
    assert job["pages_queued"] == 2  # the start page and the sitemap

    shown = (await api.get(f"/api/jobs/{job['id']}")).json()
    assert shown["progress"]["discovered"] == 2
    assert shown["progress"]["queued"] == 2
    assert shown["progress"]["by_depth"] == [
        {"depth": 0, "discovered": 2, "fetched": 0, "parsed": 0, "errors": 0}
    ]
    metrics = (await api.get("/metrics")).text
    assert f'forager_job_tasks{{job="{job["id"]}",status="pending"}} 2' in metrics
    assert f'forager_job_links{{job="{job["id"]}",fate="queued"}} 2' in metrics
    assert f'forager_job_progress{{job="{job["id"]}",measure="discovered"}} 2' in metrics
    assert f'forager_job_progress{{job="{job["id"]}",measure="products"}} 0' in metrics
    assert (
        f'forager_job_depth_tasks{{job="{job["id"]}",depth="0",measure="discovered"}} 2' in metrics
    )
    assert "/shop/" not in metrics  # by job id, never by URL
    listed = (await api.get("/api/jobs")).json()
    assert [j["id"] for j in listed["items"]] == [job["id"]]

    paused = await api.post(f"/api/jobs/{job['id']}/pause")
    assert paused.json()["status"] == "paused"
    again = await api.post(f"/api/jobs/{job['id']}/pause")
    assert again.status_code == 409
    assert (await api.post(f"/api/jobs/{job['id']}/resume")).json()["status"] == "running"
    cancelled = await api.post(f"/api/jobs/{job['id']}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    assert (await api.get(f"/api/jobs/{job['id']}")).json()["progress"]["queued"] == 0
    assert (await api.get("/api/jobs/999")).status_code == 404
    read_only = {"Authorization": f"Bearer {api.keys['read']}"}
    assert (await api.post("/api/jobs", json=body, headers=read_only)).status_code == 403


async def test_bad_jobs_are_refused_naming_the_field(api: Any) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"start_urls": []}, "start_urls"),
        ({"start_urls": ["ftp://shop.test/"]}, "start_urls"),
        ({"scope": "planet"}, "scope"),
        ({"rules": [{"pattern": "(", "action": "follow"}]}, "rules[0]"),
        ({"rules": [{"pattern": "x", "action": "jump"}]}, "rules"),
        ({"max_depth": -1}, "max_depth"),
    ]
    for change, field in cases:
        body = {"name": "shop", "start_urls": ["http://shop.test/"], **change}
        refused = await api.post("/api/jobs", json=body)
        assert refused.status_code == 422, (change, refused.text)
        assert field in refused.text, (change, refused.text)


async def test_a_rule_set_is_previewed_on_a_stored_page(api: Any, site: TestSite) -> None:
    runtime = api.app.state.runtime
    home = site.url("/shop/")
    task_id = (await api.post("/api/tasks", json={"url": home})).json()["task"]["id"]
    await crawl(runtime.db, runtime.settings, [task_id], parts=runtime.parts)
    rules = [
        {"pattern": "/shop/c/[a-z]+$", "action": "follow", "region": "nav"},
        {"pattern": "/shop/p/", "action": "parse"},
        {"pattern": "/shop/calendar", "action": "ignore"},
    ]
    body = {"task_id": task_id, "rules": rules}
    previewed = await api.post("/api/jobs/preview", json=body)
    assert previewed.status_code == 200, previewed.text
    fates = {link["url"]: (link["fate"], link["rule"]) for link in previewed.json()["links"]}
    other = site.url("/shop/p/101").replace("127.0.0.1", "127.0.0.2")
    [session_url] = [url for url in fates if "sid=" in url]  # a new session id each visit
    assert fates.pop(session_url) == ("no rule", None)  # the rule for categories ends at $
    assert fates == {
        site.url("/shop/c/kettles"): ("follow", 0),
        site.url("/shop/c/toasters"): ("follow", 0),
        site.url("/shop/c/mugs"): ("follow", 0),
        other: ("out of scope", None),
        site.url("/shop/p/900"): ("nofollow", None),
        site.url("/shop/calendar?month=2026-01"): ("ignore", 2),
    }
    trap = await api.post("/api/jobs/preview", json={**body, "max_query_params": 0})
    assert ("trap", None) in [(f["fate"], f["rule"]) for f in trap.json()["links"]]
    nofollow = await api.post("/api/jobs/preview", json={**body, "follow_nofollow": True})
    assert {"url": site.url("/shop/p/900"), "fate": "parse", "rule": 1} in nofollow.json()["links"]
    # Nothing was queued or started by a preview.
    assert (await api.get("/api/jobs")).json()["total"] == 0

    missing = await api.post("/api/jobs/preview", json={**body, "task_id": 999})
    assert missing.status_code == 404
    broken = [{"pattern": "(", "action": "parse"}]
    bad = await api.post("/api/jobs/preview", json={**body, "rules": broken})
    assert bad.status_code == 422 and "rules[0]" in bad.text
