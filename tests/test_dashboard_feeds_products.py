"""The dashboard's Feeds page, the Products page's code and rating filters and sorts, and a
domain's sticky sessions, end to end: Debian's Chromium (through Playwright) against a real
`forager serve` whose built-in workers crawl loopback shops.

The Products tests crawl a small shop of their own on 127.0.0.2 (Amazon-style pages whose
ASINs and ratings the tests choose: the shared test site rates every product 4.5).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import pages
from tests.support.dashboard import Server, chromium, go, logged_in, serve, shoot
from tests.support.sticky import MARK

SHOP_HOST = "127.0.0.2"
RATINGS = {"B0DASHA001": "3.1", "B0DASHB002": "4.8", "B0DASHC003": "2.2"}  # ASIN: stars
A, B, C = (f"Widget {asin}" for asin in RATINGS)


class _Shop(BaseHTTPRequestHandler):
    """``/dp/<ASIN>``: an Amazon-style page titled ``Widget <ASIN>``, rated RATINGS[ASIN]."""

    def do_GET(self) -> None:
        asin = self.path.removeprefix("/dp/")
        if asin not in RATINGS:
            self.send_error(404)
            return
        html = (
            pages.amazon_page(asin, kb=1)
            .replace("Widget Pro 3000", f"Widget {asin}")
            .replace('title="4.5 out of 5 stars"', f'title="{RATINGS[asin]} out of 5 stars"')
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(html)))
        self.end_headers()
        self.wfile.write(html)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serve(tmp_path_factory.mktemp("dashboard-feeds")) as running:
        yield running


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def admin(browser: Any, server: Server) -> Iterator[Any]:
    page = logged_in(browser, server, "admin")
    yield page
    page.context.close()


@pytest.fixture(scope="module")
def reader(browser: Any, server: Server) -> Iterator[Any]:
    page = logged_in(browser, server, "read")
    yield page
    page.context.close()


@pytest.fixture(scope="module")
def shop(server: Server) -> Iterator[dict[str, int]]:
    """The three shop products, crawled: ASIN → product id."""
    httpd = ThreadingHTTPServer((SHOP_HOST, 0), _Shop)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://{SHOP_HOST}:{httpd.server_address[1]}"
        tasks = [server.task(f"{base}/dp/{asin}", parser_name="amazon") for asin in RATINGS]
        for task in tasks:
            server.wait_task(task["id"], lambda t: t["status"] in ("completed", "failed"))
        found = server.api.get("/api/products", params={"domain": SHOP_HOST}).json()["items"]
        ids = {p["asin"]: p["id"] for p in found}
        assert set(ids) == set(RATINGS), found
        yield ids
    finally:
        httpd.shutdown()
        httpd.server_close()


def _names(page: Any) -> Any:
    return page.locator("table[aria-label=Products] tbody tr td:first-child")


def test_products_filter_by_asin_and_rating_sort_by_rating_and_export_the_filter(
    admin: Any, server: Server, shop: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    go(admin, f"/products?domain={SHOP_HOST}")
    expect(_names(admin)).to_have_count(3)
    admin.get_by_label("ASIN").fill("b0dashb002")  # any case: the API upper-cases it
    admin.get_by_role("button", name="Search").click()
    expect(admin).to_have_url(re.compile(r"asin=b0dashb002"))
    expect(_names(admin)).to_have_text([B])
    export = admin.get_by_role("link", name="CSV").get_attribute("href") or ""
    assert "asin=b0dashb002" in export and f"domain={SHOP_HOST}" in export
    exported = server.api.get(export).text.splitlines()
    assert len(exported) == 2 and "B0DASHB002" in exported[1]  # the header and that product

    # Highest rated first on the first click, lowest first on the second; the export follows.
    go(admin, f"/products?domain={SHOP_HOST}")
    admin.get_by_role("button", name="Rating").click()
    expect(admin).to_have_url(re.compile(r"sort=-rating"))
    expect(_names(admin)).to_have_text([B, A, C])
    expect(admin.locator("[data-cell=rating]")).to_have_text(["4.8", "3.1", "2.2"])
    assert "sort=-rating" in (admin.get_by_role("link", name="JSONL").get_attribute("href") or "")
    admin.get_by_role("button", name=re.compile("Rating")).click()
    expect(admin).to_have_url(re.compile(r"sort=rating(&|$)"))
    expect(_names(admin)).to_have_text([C, A, B])

    admin.get_by_label("Rating from").fill("3")
    admin.get_by_role("button", name="Search").click()
    expect(admin).to_have_url(re.compile(r"min_rating=3&sort=rating"))  # the order stays
    expect(_names(admin)).to_have_text([A, B])

    # A value the API refuses: its 422 is shown, naming the field.
    go(admin, "/products?asin=short")
    expect(admin.get_by_role("alert")).to_contain_text("asin")


def _feeds_dir(server: Server) -> Path:
    return server.log.parent / "data" / "feeds"


def test_a_feed_made_in_the_dashboard_runs_and_its_runs_show(
    admin: Any, reader: Any, server: Server, shop: dict[str, int]
) -> None:
    from playwright.sync_api import expect

    go(admin, "/feeds")
    form = admin.get_by_role("form", name="New feed")
    form.get_by_label("Name").fill("dash shop")
    form.get_by_label("Format").select_option("csv")
    form.get_by_label("Folder").fill("../up")
    form.get_by_label("Only domain").fill(SHOP_HOST)
    form.get_by_role("button", name="Create feed").click()
    expect(admin.get_by_test_id("feed-error")).to_contain_text("422: path:")
    form.get_by_label("Folder").fill("dash")
    form.get_by_role("button", name="Create feed").click()
    expect(admin).to_have_url(re.compile(r"/feeds\?feed=\d+"))
    [feed] = [f for f in server.api.get("/api/feeds").json()["items"] if f["name"] == "dash shop"]
    assert (feed["format"], feed["path"], feed["domain"]) == ("csv", "dash", SHOP_HOST)

    # A new feed runs at once (the scheduler in serve); its run shows up by itself.
    runs = admin.get_by_test_id("feed-runs").locator("tr[data-run]")
    expect(runs).to_have_count(1)
    expect(runs.locator("[data-cell=status]")).to_have_text("succeeded")
    expect(runs.locator("[data-cell=rows]")).to_have_text("3")
    line = admin.locator(f'tr[data-feed="{feed["id"]}"]')
    expect(line.get_by_test_id("last-run")).to_contain_text("3 rows")
    shoot(admin, "feeds")
    [written] = (_feeds_dir(server) / "dash").glob(f"feed-{feed['id']}-run-*.csv")
    assert len(written.read_text().splitlines()) == 4  # the header and the shop's 3 products

    # Run now: a second run, with nothing new; then pause it.
    admin.get_by_role("button", name="Run now feed dash shop").click()
    expect(runs).to_have_count(2)
    expect(runs.first.locator("[data-cell=rows]")).to_have_text("0")
    admin.get_by_role("button", name="Pause feed dash shop").click()
    expect(line.locator("[data-state]")).to_have_text("paused")
    assert server.api.get(f"/api/feeds/{feed['id']}").json()["enabled"] is False

    # A read key sees the feed and its runs, and nothing that changes them.
    reader.goto(f"{server.url}/feeds?feed={feed['id']}")  # the server knows the page too
    expect(reader.get_by_test_id("feed-runs").locator("tr[data-run]")).to_have_count(2)
    assert reader.get_by_role("form", name="New feed").count() == 0
    assert reader.locator(f'tr[data-feed="{feed["id"]}"] button').count() == 0

    admin.get_by_role("button", name="Delete feed dash shop").click()
    admin.get_by_role("dialog").get_by_role("button", name="Delete feed dash shop").click()
    expect(line).to_have_count(0)
    assert server.api.get(f"/api/feeds/{feed['id']}").status_code == 404
    assert written.exists()  # the files it wrote stay


def test_a_session_retired_in_the_dashboard_shows_retired(
    admin: Any, reader: Any, server: Server
) -> None:
    from playwright.sync_api import expect

    host = "127.0.0.1"
    created = server.api.post(
        "/api/domains",
        json={
            "domain_name": host,
            "base_url": server.site.url("/").rstrip("/"),
            "crawl_delay_seconds": 0,
            "sticky_sessions": {"max_uses": 100},
        },
    )
    assert created.status_code == 201, created.text
    domain = created.json()
    first = server.task(server.site.url("/sticky/p/1"))
    server.wait_task(first["id"], lambda t: t["status"] == "completed")
    [session] = server.api.get(f"/api/domains/{domain['id']}/sessions").json()["items"]
    assert session["state"] == "active" and session["has_cookies"]

    go(admin, f"/domains?q={host}")
    box = admin.locator(f'tr[data-domain="{host}"]').get_by_test_id("sessions")
    box.locator("summary").click()
    line = box.locator(f'tr[data-session="{session["id"]}"]')
    expect(line.locator("[data-cell=state]")).to_have_text("active")
    expect(box).to_contain_text("kept (not shown)")
    assert MARK not in admin.content()  # the session's cookie never reaches the page
    box.get_by_role("button", name=f"Retire session {session['id']}").click()
    expect(line.locator("[data-cell=state]")).to_have_text("retired")
    expect(line).to_contain_text("operator")
    shown = server.api.get(f"/api/domains/{domain['id']}/sessions").json()["items"]
    assert [(s["id"], s["state"]) for s in shown] == [(session["id"], "retired")]

    # The next fetch starts a new session; "Retire all" (asked first) retires it too.
    second = server.task(server.site.url("/sticky/p/2"))
    server.wait_task(second["id"], lambda t: t["status"] == "completed")
    go(reader, f"/domains?q={host}")
    seen = reader.locator(f'tr[data-domain="{host}"]').get_by_test_id("sessions")
    seen.locator("summary").click()
    expect(seen.locator("tr[data-session]")).to_have_count(2)
    assert seen.get_by_role("button").count() == 0  # a read key retires nothing
    go(admin, f"/domains?q={host}")
    box.locator("summary").click()
    box.get_by_role("button", name="Retire all 1 active session").click()
    admin.get_by_role("dialog").get_by_role("button", name="Retire them all").click()
    expect(box.locator("[data-cell=state]")).to_have_text(["retired", "retired"])
    states = server.api.get(f"/api/domains/{domain['id']}/sessions").json()["items"]
    assert {s["state"] for s in states} == {"retired"}
