"""The dashboard end to end: Debian's Chromium (through Playwright) against a real
`forager serve` whose built-in workers crawl the loopback test site.

Screenshots of every page at 1280 px and 390 px are written to docs/screenshots/.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.dashboard import (
    WAIT_MS,
    Server,
    chromium,
    go,
    logged_in,
    row,
    serve,
    shoot,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serve(tmp_path_factory.mktemp("dashboard")) as running:
        yield running


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def _page(browser: Any, server: Server, role: str = "admin") -> Any:
    return logged_in(browser, server, role)


@pytest.fixture(scope="module")
def admin(browser: Any, server: Server) -> Iterator[Any]:
    page = _page(browser, server)
    yield page
    page.context.close()


def test_login_submit_and_see_tasks_complete_live(browser: Any, server: Server) -> None:
    from playwright.sync_api import expect

    known = server.task(server.site.url("/product/1"))
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.goto(server.url + "/tasks")
    key = page.get_by_label("API key")
    expect(key).to_be_visible()
    shoot(page, "login")
    key.fill("fgr_not-a-key")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    key.fill(server.keys["admin"])
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Tasks")).to_be_visible()  # back where we were
    cookies = {c["name"]: c for c in context.cookies()}
    assert (
        cookies["forager_session"]["httpOnly"]
        and cookies["forager_session"]["sameSite"] == "Strict"
    )
    assert server.keys["admin"] not in cookies["forager_session"]["value"]

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Submit").click()
    slow = server.site.url("/slow/1500")
    lines = [slow, server.site.url("/product/2"), known["url"], "not a url"]
    page.get_by_label("URLs, one per line").fill("\n".join(lines))
    page.get_by_label("Batch name").fill("e2e-live")
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_test_id("submit-summary")).to_have_text("2 new, 1 duplicate, 1 invalid")
    invalid = page.locator('tr[data-result="invalid"]')
    expect(invalid).to_have_count(1)
    expect(invalid.locator("td").nth(3)).not_to_be_empty()  # the reason
    shoot(page, "submit")

    page.evaluate("window.__sameDocument = true")
    go(page, "/tasks?batch_name=e2e-live")
    tasks = server.api.get("/api/tasks", params={"batch_name": "e2e-live"}).json()["items"]
    assert len(tasks) == 2
    for task in tasks:  # each row turns to completed without a reload
        expect(row(page, task["id"]).locator("[data-cell=status]")).to_have_text(
            "completed", timeout=30_000
        )
    # A change made elsewhere (here through the API) shows up by itself, too.
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    waiting = server.task(server.site.url("/product/3"), scheduled_at=later, batch_name="e2e-live")
    expect(row(page, waiting["id"]).locator("[data-cell=status]")).to_have_text("pending")
    server.api.post(f"/api/tasks/{waiting['id']}/pause")
    expect(row(page, waiting["id"]).locator("[data-cell=status]")).to_have_text("paused")
    assert page.evaluate("window.__sameDocument") is True
    go(page, "/")
    expect(page.get_by_test_id("count-completed").locator("b")).not_to_have_text("0")
    context.close()


def test_pause_and_resume_a_task(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    task = server.task(server.site.url("/product/40"), scheduled_at=later)
    go(admin, f"/tasks/{task['id']}")
    heading = admin.get_by_role("heading", name=f"Task #{task['id']}")
    expect(heading).to_contain_text("pending")
    admin.get_by_role("button", name="Pause").click()
    expect(heading).to_contain_text("paused")
    assert server.api.get(f"/api/tasks/{task['id']}").json()["status"] == "paused"
    admin.get_by_role("button", name="Resume").click()
    expect(heading).not_to_contain_text("paused")  # back in the queue (resume is due at once)
    assert server.api.get(f"/api/tasks/{task['id']}").json()["status"] != "paused"
    events = server.api.get(
        "/api/events", params={"entity_type": "task", "entity_id": task["id"]}
    ).json()["items"]
    names = [e["event"] for e in reversed(events)]  # oldest first
    assert names.index("paused") < names.index("resumed")


def test_restart_failed_tasks(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    failed = server.task(server.site.url("/status/404"))
    server.wait_task(failed["id"], lambda t: t["status"] == "failed")

    def fetches(n: int) -> Callable[[dict[str, Any]], bool]:
        return lambda t: (
            t["status"] == "failed" and (sum(a["phase"] == "fetch" for a in t["attempts"]) >= n)
        )

    go(admin, "/tasks?status=failed")
    line = row(admin, failed["id"])
    expect(line).to_be_visible()
    shoot(admin, "tasks")
    line.get_by_role("checkbox").check()
    admin.get_by_role("group", name="Actions on selected tasks").get_by_role(
        "button", name="Restart", exact=True
    ).click()
    expect(admin.locator(".toast").first).to_contain_text("restart: 1 of 1 done")
    server.wait_task(failed["id"], fetches(2))  # it was fetched again (and failed again)

    # "Restart all failed" asks first; cancelling changes nothing.
    admin.get_by_role("button", name="Restart all failed").click()
    dialog = admin.get_by_role("dialog")
    expect(dialog).to_contain_text("Restart")
    dialog.get_by_role("button", name="Not now").click()
    assert server.api.get(f"/api/tasks/{failed['id']}").json()["status"] == "failed"
    admin.get_by_role("button", name="Restart all failed").click()
    admin.get_by_role("dialog").get_by_role(
        "button", name=re.compile(r"^Restart \d+ failed tasks?$")
    ).click()
    expect(admin.locator(".toast").last).to_contain_text("Restarted")
    server.wait_task(failed["id"], fetches(3))

    go(admin, f"/tasks/{failed['id']}")
    attempts = admin.locator("h2:has-text('Attempts') + .table-wrap tbody tr")
    expect(attempts).to_have_count(3)
    expect(admin.get_by_text("No page stored.")).to_be_visible()


def test_search_products_and_open_a_price_chart(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    task = server.task(server.site.url("/product/77"))
    server.wait_task(task["id"], lambda t: t["status"] == "completed")
    httpx.post(server.site.url("/__price/77"), json={"price": "99.50"}).raise_for_status()
    server.api.post(f"/api/tasks/{task['id']}/restart")
    server.wait_task(
        task["id"],
        lambda t: (
            t["status"] == "completed" and sum(a["phase"] == "fetch" for a in t["attempts"]) >= 2
        ),
    )

    go(admin, "/products")
    admin.get_by_label("Search", exact=True).fill("Test Product 77")
    admin.get_by_role("button", name="Search").click()
    expect(admin).to_have_url(re.compile(r"/products\?q=Test\+Product\+77"))
    found = admin.get_by_role("link", name="Test Product 77")
    expect(found).to_be_visible()
    product_row = admin.locator("tr", has=found)
    expect(product_row.locator(".up")).to_have_count(1)  # 77.99 → 99.50
    export = admin.get_by_role("link", name="CSV")
    assert "q=Test+Product+77" in (export.get_attribute("href") or "")
    shoot(admin, "products")
    found.click()
    chart = admin.get_by_test_id("price-chart").locator("svg")
    expect(chart).to_have_attribute("data-points", "2")
    expect(chart.locator("polyline")).to_have_count(1)
    shoot(admin, "product")

    # Its task's page shows the stored page in a sandbox where no script runs.
    go(admin, f"/tasks/{task['id']}")
    frame = admin.locator("iframe.stored")
    expect(frame).to_have_attribute("sandbox", "")
    expect(
        admin.frame_locator("iframe.stored").get_by_role("heading", name="Test Product 77")
    ).to_be_visible()
    expect(admin.get_by_role("link", name="Test Product 77")).to_be_visible()  # the product
    shoot(admin, "task")


def test_switch_image_downloads_on_and_see_the_stored_images(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    task = server.task(server.site.url("/gallery/91"))
    server.wait_task(task["id"], lambda t: t["status"] == "completed")
    domain = server.api.get("/api/domains", params={"q": "127.0.0.1"}).json()["items"][0]
    go(admin, "/domains")
    line = admin.locator("tr[data-domain='127.0.0.1']")
    try:
        line.get_by_label("Download images of 127.0.0.1").check()
        line.get_by_role("button", name="Save").click()
        # The save itself, not a toast: an earlier test's "saved" toast may still be on screen.
        server.wait(f"/api/domains/{domain['id']}", lambda d: d["download_images"] is True)
        product_id = next(
            p["id"]
            for p in server.api.get("/api/products", params={"q": "Test Product 91"}).json()[
                "items"
            ]
            if p["url"].endswith("/gallery/91")
        )

        server.wait(
            f"/api/products/{product_id}/images",
            lambda listed: all(i["fetched_at"] for i in listed),
        )
        go(admin, f"/products/{product_id}")
        stored = admin.get_by_test_id("product-images").locator("img.stored-image")
        # photo.png, its copy, snap.jpg and large.png (under the default size cap)
        expect(stored).to_have_count(4)
        # Loaded from Forager with the session cookie: a real picture, 40 px wide.
        admin.wait_for_function(
            "() => { const i = document.querySelector('img.stored-image');"
            " return i && i.complete && i.naturalWidth === 40; }"
        )
        expect(admin.get_by_text("not stored: not an image").first).to_be_visible()
    finally:
        restore = {"download_images": False}
        assert server.api.patch(f"/api/domains/{domain['id']}", json=restore).status_code == 200


def test_adaptive_recrawl_and_tags_on_the_dashboard(admin: Any, server: Server) -> None:
    """A real recrawl that sees a new price shortens an adaptive task's frequency, and the task
    page says so and why; its product carries the submitted tag, filters by it and edits it."""
    from playwright.sync_api import expect

    task = server.task(
        server.site.url("/product/91"),
        is_recurring=True,
        crawl_frequency_seconds=86_400,
        adaptive_recrawl=True,
        tags=["kettles"],
    )
    server.wait_task(task["id"], lambda t: t["status"] == "completed")
    httpx.post(server.site.url("/__price/91"), json={"price": "55.00"}).raise_for_status()
    server.api.post(f"/api/tasks/{task['id']}/restart")
    done = server.wait_task(
        task["id"],
        lambda t: t["status"] == "completed" and t["current_crawl_frequency_seconds"] == 43_200,
    )
    assert done["crawl_frequency_reason"] == "price changed → 12 h"

    go(admin, f"/tasks/{task['id']}")
    expect(admin.get_by_test_id("recrawl")).to_contain_text("price changed → 12 h")
    go(admin, "/products?tag=kettles")
    found = admin.get_by_role("link", name="Test Product 91")
    expect(found).to_be_visible()
    expect(admin.locator("tr", has=found).get_by_role("link", name="kettles")).to_be_visible()
    found.click()
    admin.get_by_label("Tags (comma-separated)").fill("kettles, sale")
    admin.get_by_role("button", name="Save tags").click()
    expect(admin.get_by_text("Tags saved")).to_be_visible()
    product = server.api.get("/api/products", params={"tag": "sale"}).json()["items"]
    assert [p["product_name"] for p in product] == ["Test Product 91"]


def test_read_only_key_sees_but_cannot_act(browser: Any, server: Server) -> None:
    from playwright.sync_api import expect

    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    task = server.task(server.site.url("/product/41"), scheduled_at=later)
    page = _page(browser, server, role="read")
    expect(page.locator("#who-name")).to_contain_text("read-only")
    go(page, "/tasks")
    expect(row(page, task["id"])).to_be_visible()
    expect(page.locator("[data-action]")).to_have_count(0)
    expect(page.get_by_role("checkbox")).to_have_count(0)
    go(page, f"/tasks/{task['id']}")
    expect(page.get_by_role("heading", name=f"Task #{task['id']}")).to_be_visible()
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)
    go(page, "/submit")
    expect(page.get_by_text("Your key is read-only")).to_be_visible()
    # Even a hand-made request with the right CSRF token is refused by the server.
    status = page.evaluate(
        """async (id) => {
            const who = await (await fetch('/ui/session')).json();
            const r = await fetch(`/api/tasks/${id}/pause`,
              {method: 'POST', headers: {'X-CSRF-Token': who.csrf_token}});
            return r.status;
        }""",
        task["id"],
    )
    assert status == 403
    assert server.api.get(f"/api/tasks/{task['id']}").json()["status"] == "pending"
    page.context.close()


def test_cookie_posts_without_csrf_token_are_refused(server: Server) -> None:
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    task = server.task(server.site.url("/product/42"), scheduled_at=later)
    with httpx.Client(base_url=server.url) as client:
        who = client.post("/ui/login", json={"key": server.keys["admin"]}).json()
        refused = client.post(f"/api/tasks/{task['id']}/pause")
        assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
        assert server.api.get(f"/api/tasks/{task['id']}").json()["status"] == "pending"
        # A form post from another page carries no token either.
        form = client.post("/ui/logout", data={"x": "1"})
        assert form.status_code == 403
        ok = client.post(
            f"/api/tasks/{task['id']}/pause", headers={"X-CSRF-Token": who["csrf_token"]}
        )
        assert ok.status_code == 200 and ok.json()["status"] == "paused"
        # The live stream over real HTTP: snapshots arrive with the queue counts (the first
        # may predate the pause by one publishing interval).
        snapshots: list[str] = []
        with client.stream("GET", "/ui/events/stream") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    snapshots.append(line)
                    if '"paused"' in line or len(snapshots) >= 30:
                        break
        assert '"paused"' in snapshots[-1], snapshots[-1][:300]


def test_screenshots_of_the_other_pages(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    server.api.post("/api/proxies/bulk", json={"lines": "http://127.0.0.1:9/\nnot a proxy"})
    go(admin, "/")
    expect(admin.get_by_test_id("count-completed")).to_be_visible()
    expect(admin.locator("svg.chart")).to_have_count(1)
    shoot(admin, "overview")
    go(admin, "/domains")
    expect(admin.locator("tr[data-domain='127.0.0.1']")).to_be_visible()
    shoot(admin, "domains")
    go(admin, "/proxies")
    expect(admin.locator("tr[data-proxy-id]")).to_have_count(1)
    shoot(admin, "proxies")
    go(admin, "/events?entity_type=task")
    expect(admin.get_by_role("heading", name="Events")).to_be_visible()
    expect(admin.locator("tbody tr").first).to_be_visible()
    shoot(admin, "events")
    # Agents: the agents API exists in this server, so the page is there.
    admin.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").click()
    admin.get_by_label("New agent name").fill("e2e-home")
    admin.get_by_role("button", name="Create agent").click()
    expect(admin.get_by_test_id("agent-token")).to_contain_text("shown only now")
    expect(admin.locator("tr[data-agent='e2e-home']")).to_contain_text("disconnected")
    shoot(admin, "agents")


def test_edit_a_domain_disable_a_proxy_and_filter_events(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    server.task(server.site.url("/product/50"))
    domain = server.api.get("/api/domains", params={"q": "127.0.0.1"}).json()["items"][0]
    go(admin, "/domains")
    line = admin.locator("tr[data-domain='127.0.0.1']")
    line.get_by_label("Delay of 127.0.0.1").fill("0.5")
    line.get_by_label("Concurrency of 127.0.0.1").fill("3")
    assert domain["ignore_robots"] is False
    line.get_by_label("Ignore robots.txt for 127.0.0.1").check()
    line.get_by_label("Proxy strategy of 127.0.0.1").select_option("random")
    line.get_by_label("Fetcher of 127.0.0.1").select_option("auto")
    line.get_by_role("button", name="Save").click()
    # The save itself, not a toast: an earlier test's "saved" toast may still be on screen.
    saved = server.wait(f"/api/domains/{domain['id']}", lambda d: d["max_concurrent_requests"] == 3)
    assert (saved["crawl_delay_seconds"], saved["max_concurrent_requests"]) == (0.5, 3)
    assert (saved["ignore_robots"], saved["proxy_strategy"]) == (True, "random")
    expect(line.get_by_label("Ignore robots.txt for 127.0.0.1")).to_be_checked()  # reloaded
    assert saved["fetcher"] == "auto"  # what auto remembers is shown: nothing learnt yet
    expect(line.get_by_test_id("auto-fetcher")).to_have_attribute("data-fetcher", "http")
    # Every setting back, the delay and concurrency too: later tests' tasks and monitors poll
    # the same host, and a 0.5 s delay kept a monitor's first poll held back past its wait.
    restore = {
        "crawl_delay_seconds": domain["crawl_delay_seconds"],
        "max_concurrent_requests": domain["max_concurrent_requests"],
        "ignore_robots": False,
        "proxy_strategy": domain["proxy_strategy"],
        "fetcher": domain["fetcher"],
    }
    assert server.api.patch(f"/api/domains/{domain['id']}", json=restore).status_code == 200

    created = server.api.post("/api/proxies/bulk", json={"lines": "http://127.0.0.1:7/"}).json()
    proxy_id = created["results"][0]["proxy_id"]
    go(admin, "/proxies")
    proxy = admin.locator(f"tr[data-proxy-id='{proxy_id}']")
    expect(proxy.get_by_test_id("disabled-reason")).to_have_text("—")
    proxy.get_by_role("button", name="Disable").click()
    expect(proxy.get_by_test_id("disabled-reason")).to_have_text("disabled by an operator")
    assert server.api.get(f"/api/proxies/{proxy_id}").json()["is_active"] is False

    go(admin, "/events")
    admin.get_by_label("Entity", exact=True).select_option("domain")
    admin.get_by_role("button", name="Filter").click()
    expect(admin).to_have_url(re.compile(r"/events\?entity_type=domain"))
    expect(admin.locator("tbody tr").first).to_contain_text(f"domain {domain['id']}")


def test_edit_a_domains_request_profile_and_routing(admin: Any, server: Server) -> None:
    """Issue 33: a stored secret is shown masked (its value never reaches the browser), kept or
    replaced; the replaced one is what the next fetch sends (the shop prices in euros)."""
    from playwright.sync_api import expect

    server.task(server.site.url("/product/51"))
    domain = server.api.get("/api/domains", params={"q": "127.0.0.1"}).json()["items"][0]
    stale = {"cookies": [{"name": "locale", "value": "en-US-Kq93", "secret": True}]}
    seeded = server.api.patch(f"/api/domains/{domain['id']}", json={"request_profile": stale})
    assert seeded.status_code == 200, seeded.text
    go(admin, "/domains")
    line = admin.locator("tr[data-domain='127.0.0.1']")
    line.get_by_text("Profile & routing", exact=True).click()
    secret = line.get_by_label("127.0.0.1 cookie value")
    expect(secret).to_have_value("")  # masked: the stored value is not in the page
    expect(secret).to_have_attribute("type", "password")
    assert "en-US-Kq93" not in admin.content()
    line.get_by_role("button", name="Add header").click()
    line.get_by_label("127.0.0.1 header name").fill("Accept-Language")
    line.get_by_label("127.0.0.1 header value").fill("de-DE,de;q=0.9")
    secret.fill("de-DE")  # replaces the stored secret
    line.get_by_label("Routing of 127.0.0.1").select_option("agents_preferred")
    line.get_by_role("button", name="Apply profile & routing").click()
    saved = server.wait(f"/api/domains/{domain['id']}", lambda d: d["routing"] != "any")
    assert saved["routing"] == "agents_preferred"
    assert saved["request_profile"]["headers"] == [
        {"name": "Accept-Language", "value": "de-DE,de;q=0.9", "secret": False}
    ]
    shown = saved["request_profile"]["cookies"]
    assert shown == [{"name": "locale", "value": None, "secret": True}]
    back = server.api.patch(f"/api/domains/{domain['id']}", json={"routing": "any"})
    assert back.status_code == 200, back.text
    try:
        task = server.task(server.site.url("/shop/77"))
        server.wait_task(task["id"], lambda t: t["status"] == "completed")
        products = server.api.get("/api/products", params={"currency": "EUR"}).json()["items"]
        assert [p["url"] for p in products if p["url"].endswith("/shop/77")], products
    finally:
        cleared = server.api.patch(f"/api/domains/{domain['id']}", json={"request_profile": {}})
        assert cleared.status_code == 200, cleared.text


def test_upload_a_file_and_use_the_keyboard(admin: Any, server: Server, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    urls = tmp_path / "urls.csv"
    urls.write_text(f"{server.site.url('/product/60')},note\n# a comment\n")
    go(admin, "/submit")
    admin.get_by_label("load a file").set_input_files(str(urls))
    expect(admin.get_by_label("URLs, one per line")).to_have_value(re.compile("/product/60"))
    admin.get_by_label("Priority (1 highest)").fill("2")
    admin.get_by_role("button", name="Submit").click()
    expect(admin.get_by_test_id("submit-summary")).to_have_text("1 new, 0 duplicate, 0 invalid")
    created = admin.locator('tr[data-result="created"] a').inner_text()
    task = server.api.get(f"/api/tasks/{created.lstrip('#')}").json()
    assert (task["url"], task["priority"]) == (server.site.url("/product/60"), 2)

    # Keyboard only: focus the navigation, follow a link with Enter.
    admin.get_by_role("link", name="Events").focus()
    admin.keyboard.press("Enter")
    expect(admin.get_by_role("heading", name="Events")).to_be_visible()
    admin.keyboard.press("Tab")  # focus moves on through real controls
    assert admin.evaluate("document.activeElement.tagName") in ("A", "BUTTON", "INPUT", "SELECT")


def test_monitors_page_creates_charts_and_pauses_a_monitor(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    price = server.site.url("/__price/93")
    httpx.post(price, json={"price": "10.00"}, timeout=10).raise_for_status()
    admin.get_by_role("navigation", name="Main").get_by_role("link", name="Monitors").click()
    admin.get_by_label("URL", exact=True).fill(server.site.url("/product/93"))
    admin.get_by_label("Name", exact=True).fill("e2e price")
    admin.get_by_label("Reads").select_option("parser_name")
    admin.get_by_label("Fields (name = selector, one a line) or parser").fill("generic")
    admin.get_by_label("Interval (s)").fill("0.5")
    admin.get_by_role("button", name="Create monitor").click()
    row = admin.locator("tr[data-monitor]").filter(has_text="e2e price")
    expect(row).to_contain_text("active")  # the built-in runner claimed it at once
    expect(row).to_contain_text("healthy")
    expect(row).to_contain_text("1 /")  # the first poll saw 10.00 (only then change it)
    httpx.post(price, json={"price": "12.50"}, timeout=10).raise_for_status()
    expect(row).to_contain_text("2 /")  # two changes seen
    row.get_by_role("button", name="e2e price").click()
    expect(admin.get_by_role("img", name="price over time")).to_have_attribute("data-points", "2")
    shoot(admin, "monitors")
    # A page that fails: its errors are listed unresolved, and one is resolved by hand.
    broken = server.api.post(
        "/api/monitors",
        json={"url": server.site.url("/status/500"), "parser_name": "generic", "name": "broken"},
    ).json()
    first = admin.locator("tr[data-error]").first
    expect(first).to_contain_text("http_5xx")
    error_id = first.get_attribute("data-error")
    error = admin.locator(f'tr[data-error="{error_id}"]')
    error.get_by_role("button", name="Resolve").click()
    expect(error).to_have_count(0)  # resolved: no longer listed
    done = server.api.get("/api/monitor-errors", params={"resolved": "true"}).json()["items"]
    assert [(e["id"], e["resolution_method"]) for e in done] == [(int(error_id or 0), "manual")]
    server.api.delete(f"/api/monitors/{broken['id']}")
    row.get_by_role("button", name="Pause").click()
    # "paused" alone may be the domain's policy holding polls back (the broken monitor's 500s
    # on the same host): only a monitor paused by hand offers Resume.
    expect(row.get_by_role("button", name="Resume")).to_be_visible()
    expect(row).to_contain_text("paused")
    monitor_id = int(row.get_attribute("data-monitor") or 0)
    assert server.api.get(f"/api/monitors/{monitor_id}").json()["enabled"] is False
    row.get_by_role("button", name="Delete").click()
    admin.get_by_role("dialog").get_by_role("button", name=f"Delete monitor {monitor_id}").click()
    expect(row).to_have_count(0)


def test_alerts_page_shows_the_secret_once_and_resends_a_delivery(
    admin: Any, server: Server
) -> None:
    from playwright.sync_api import expect

    admin.get_by_role("navigation", name="Main").get_by_role("link", name="Alerts").click()
    admin.get_by_label("Name", exact=True).fill("e2e failures")
    admin.get_by_label("When").select_option("task_failed")
    # The receiver is this server's /health, which refuses a POST: every try is a 405.
    admin.get_by_label("Target URL").fill(f"{server.url}/health")
    admin.get_by_role("button", name="Create rule").click()
    expect(admin.get_by_test_id("alert-secret")).to_be_visible()
    secret = admin.get_by_test_id("alert-secret").locator("code").inner_text()
    rule = admin.locator("tr[data-rule]").filter(has_text="e2e failures")
    expect(rule).to_contain_text(f"webhook: {server.url}/…")  # the port tells receivers apart
    assert secret not in (server.api.get("/api/alerts/rules").text)
    # Fails for good at once: an alert. Its own URL: test_restart_failed_tasks may have failed
    # /status/404 on this server already (before the rule), and a resubmission is that old task.
    failing = server.task(server.site.url("/status/404?alerts"))
    # The module's other tests may still hold this host's slots: wait for the failure itself,
    # then for the page's next redraw.
    server.wait_task(failing["id"], lambda t: t["status"] == "failed")
    delivery = admin.locator("tr[data-delivery]").first
    expect(delivery).to_contain_text("task_failed")
    expect(delivery).to_contain_text("405")
    shoot(admin, "alerts")
    delivery.get_by_role("button", name="Tries").click()
    expect(admin.get_by_text("the receiver answered 405").first).to_be_visible()
    delivery.get_by_role("button", name="Re-send").click()
    expect(admin.get_by_text("will be sent again")).to_be_visible()
    nav = admin.get_by_role("navigation", name="Main")
    nav.get_by_role("link", name="Events").click()
    nav.get_by_role("link", name="Alerts").click()
    expect(admin.locator("tr[data-rule]").first).to_be_visible()
    expect(admin.get_by_test_id("alert-secret")).to_have_count(0)  # shown once only


def test_selector_parser_editor_previews_live_and_saves(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    task = server.task(server.site.url("/product/70"))
    done = server.wait_task(task["id"], lambda t: t["status"] == "completed")
    domain_id = done["domain_id"]
    before = server.api.get(f"/api/domains/{domain_id}").json()["parser_name"]
    go(admin, "/domains")
    admin.locator("tr[data-domain='127.0.0.1']").get_by_role("link", name="Selector parser").click()
    expect(admin.get_by_role("heading", name="Selector parser · 127.0.0.1")).to_be_visible()
    admin.get_by_label("Stored page").select_option(str(task["id"]))
    rules = admin.get_by_label("Rules (JSON)")
    good = {
        "product_name": {"css": "h1.product-title"},
        "price": {"css": ".price-box .price", "post": ["price"]},
        "category": {"css": "nav.breadcrumb a", "all": True},
    }
    rules.fill(json.dumps(good))  # previewed as typed, never saved
    # The preview's rows; the comparison with the map in use, drawn a moment later, has rows of
    # the same fields for each stored page (with a verdict).
    value = admin.locator('tr[data-field="product_name"]:not([data-verdict]) td.value')
    expect(value).to_have_text("Test Product 70")
    expect(admin.locator('tr[data-field="price"]:not([data-verdict]) td.value')).to_have_text(
        re.compile(r"^\d+\.\d\d$")
    )
    expect(admin.locator('tr[data-field="category"]:not([data-verdict])')).to_contain_text(
        "add a join step"
    )
    bad = {**good, "price": {"css": ".price", "post": [{"regex": "(\\d+)\\1"}]}}
    rules.fill(json.dumps(bad))
    expect(admin.get_by_role("alert")).to_contain_text("fields.price.post.0.regex")
    expect(admin.get_by_role("alert")).to_contain_text("backreferences")
    good["category"]["post"] = [{"join": " > "}]
    rules.fill(json.dumps(good))
    expect(admin.locator('tr[data-field="category"]:not([data-verdict]) td.value')).to_have_text(
        re.compile(r"^Home > Category \d+$")
    )
    assert server.api.get(f"/api/domains/{domain_id}/selector-parsers").json()["total"] == 0
    admin.get_by_label("Note").fill("from the editor")
    admin.get_by_role("button", name="Save as new version").click()
    expect(admin.locator('tr[data-version="1"]')).to_contain_text("yes")
    saved = server.api.get(f"/api/domains/{domain_id}/selector-parsers/1").json()
    assert (saved["fields"], saved["note"], saved["in_use"]) == (good, "from the editor", True)
    shoot(admin, "selector-parser")
    # The other tests of this module crawl the same host with its usual parser.
    restore = server.api.patch(f"/api/domains/{domain_id}", json={"parser_name": before})
    assert restore.status_code == 200


def test_items_from_a_listing_built_in_the_editor_listed_with_their_versions(
    admin: Any, server: Server
) -> None:
    from playwright.sync_api import expect

    def fetched(times: int) -> Callable[[dict[str, Any]], bool]:
        return lambda t: (
            t["status"] in ("completed", "failed")
            and sum(a["phase"] == "fetch" for a in t["attempts"]) >= times
        )

    shop = server.task(server.site.url("/product/62"))  # a product page of the same host
    task = server.task(server.site.url("/listing/6"))
    done = server.wait_task(task["id"], fetched(1))  # the domain's usual parser: no product
    server.wait_task(shop["id"], lambda t: t["status"] == "completed")
    domain_id = done["domain_id"]
    before = server.api.get(f"/api/domains/{domain_id}").json()["parser_name"]
    go(admin, f"/domains/{domain_id}/parser")
    admin.get_by_label("Stored page").select_option(str(task["id"]))
    admin.get_by_label("Rules (JSON)").fill("{}")
    admin.get_by_role("button", name="Add an item extractor (ads, listings)").click()
    ad = server.site.url("/ad/61")
    preview = admin.locator(f'section[data-items="0"] tr[data-key="{ad}"]')
    expect(preview).to_contain_text("Bike 61")
    expect(admin.get_by_role("heading", name='Items "ad": 4 found')).to_be_visible()
    admin.get_by_label("Note").fill("ads")
    admin.get_by_role("button", name="Save as new version").click()
    # Items only: the product pages would lose their products, and Save says so first.
    dialog = admin.get_by_role("dialog")
    expect(dialog).to_contain_text("loses product_name")
    dialog.get_by_role("button", name="Save and lose them").click()
    expect(admin.locator("tr[data-version]").first).to_contain_text("yes")
    try:
        server.api.post(f"/api/tasks/{task['id']}/restart").raise_for_status()
        server.wait_task(task["id"], fetched(2))
        httpx.post(server.site.url("/__price/61"), json={"price": "99.50"}).raise_for_status()
        server.api.post(f"/api/tasks/{task['id']}/restart").raise_for_status()
        assert server.wait_task(task["id"], fetched(3))["status"] == "completed"
    finally:  # the other tests of this module crawl the same host with its usual parser
        restore = server.api.patch(f"/api/domains/{domain_id}", json={"parser_name": before})
        assert restore.status_code == 200

    go(admin, "/items")
    admin.get_by_label("Search", exact=True).fill("Bike 61")
    admin.get_by_role("button", name="Search").click()
    expect(admin).to_have_url(re.compile(r"/items\?q=Bike\+61"))
    found = admin.get_by_role("link", name=ad)
    expect(found).to_be_visible()
    expect(admin.locator("tr", has=found)).to_contain_text("v2")
    shoot(admin, "items")
    found.click()
    expect(admin.get_by_role("heading", name=f"ad: {ad}")).to_be_visible()
    expect(admin.locator('tr[data-field="price"]')).to_contain_text("99.50")
    newest = admin.locator('tr[data-version="2"]')
    expect(newest).to_contain_text("changed: price")
    expect(newest).to_contain_text("price: 99.50")
    expect(admin.locator('tr[data-version="1"]')).to_contain_text("first seen")
    shoot(admin, "item")


def test_start_a_crawl_job_preview_its_rules_and_see_its_progress(
    admin: Any, server: Server
) -> None:
    from playwright.sync_api import expect

    go(admin, "/jobs")
    form = admin.get_by_role("form", name="Start a crawl job")
    form.get_by_label("Name").fill("kettles")
    form.get_by_label("Start URLs, one per line").fill(server.site.url("/shop/c/kettles"))
    rules = ["follow=/shop/c/kettles(\\?page=\\d+)?$", "parse=/shop/p/\\d+$@main.grid"]
    form.get_by_label("Rules, one per line", exact=False).fill("\n".join(rules))
    form.get_by_label("Max pages").fill("30")
    form.get_by_role("button", name="Start job").click()
    expect(admin).to_have_url(re.compile(r"/jobs\?job=\d+"))
    job_id = int(admin.url.rsplit("=", 1)[1])
    job_row = admin.locator(f'tr[data-job="{job_id}"]')
    # The listing and its three pages, and the 7 kettles on them, counted live.
    expect(job_row.locator("[data-cell=parsed]")).to_have_text("7", timeout=60_000)
    expect(job_row.locator("[data-cell=products]")).to_have_text("7")
    expect(job_row.locator("[data-cell=status]")).to_have_text(re.compile("running|done"))
    by_depth = admin.get_by_role("region", name=f"Job {job_id} by depth")
    expect(by_depth.locator('tr[data-depth="0"] [data-cell=fetched]')).to_have_text("1")
    shoot(admin, "jobs")

    # The listing's stored page previews a different rule set: what each link would become.
    listing = server.site.url("/shop/c/kettles")
    found = server.api.get("/api/tasks", params={"url_contains": "/shop/c/kettles"}).json()
    [start] = [t for t in found["items"] if t["url"] == listing]
    form.get_by_label("Rules, one per line", exact=False).fill("ignore=page=\nparse=/shop/p/")
    form.get_by_label("Preview on the stored page of task").fill(str(start["id"]))
    form.get_by_role("button", name="Preview rules").click()
    preview = admin.get_by_test_id("preview")
    expect(preview.locator('tr[data-fate="parse"]')).to_have_count(4)  # 3 in the grid, 1 aside
    expect(preview.locator('tr[data-fate="ignore"]')).not_to_have_count(0)

    # Done by now or not, it runs again from the dashboard once finished (or is cancelled).
    first = server.wait(f"/api/jobs/{job_id}", lambda j: j["status"] == "done")
    admin.get_by_role("button", name=f"Run again job {job_id}").click()
    server.wait(f"/api/jobs/{job_id}", lambda j: j["started_at"] != first["started_at"])


def test_batches_page_follows_a_batch_and_moves_it(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    urls = [server.site.url(f"/product/{n}?batch=e2e") for n in (61, 62)]
    body = {"urls": urls, "batch_name": "e2e-batch", "scheduled_at": later}
    assert server.api.post("/api/tasks/batch", json=body).json()["created"] == 2
    go(admin, "/batches")
    admin.locator("tr[data-batch='e2e-batch']").get_by_role("link", name="e2e-batch").click()
    summary = admin.get_by_test_id("batch-summary")
    expect(summary).to_contain_text("running")
    expect(summary).to_contain_text("0 of 2 done")
    expect(admin.get_by_test_id("batch-statuses")).to_contain_text("pending 2")
    admin.get_by_role("button", name="Pause").click()
    expect(summary).to_contain_text("paused")
    expect(admin.get_by_test_id("batch-statuses")).to_contain_text("paused 2")
    shoot(admin, "batches")
    assert server.api.get("/api/batches/e2e-batch").json()["paused"] == 2
    expect(admin.get_by_role("button", name="Resume")).to_be_visible()
    admin.get_by_role("button", name="Cancel batch").click()
    admin.get_by_role("dialog").get_by_role("button", name="Cancel batch").click()
    expect(summary).to_contain_text("finished")
    expect(admin.get_by_test_id("batch-statuses")).to_contain_text("cancelled 2")
    admin.get_by_role("button", name="Restart all").click()
    admin.get_by_role("dialog").get_by_role("button", name="Restart all").click()
    expect(admin.get_by_test_id("batch-statuses")).to_contain_text("completed 2")  # live
    expect(summary).to_contain_text("2 products")
    events = server.api.get("/api/events", params={"entity_type": "batch"}).json()["items"]
    assert [e["event"] for e in reversed(events)] == ["paused", "cancelled", "restarted"]


def test_serve_stops_at_once_with_a_dashboard_stream_open(server: Server) -> None:
    """Runs last in this module: it stops the server."""
    headers = {"Authorization": f"Bearer {server.keys['read']}"}
    timeout = httpx.Timeout(10.0)  # below the stream's 15 s keep-alive: a hang fails
    with (
        httpx.Client(base_url=server.url, headers=headers, timeout=timeout) as client,
        client.stream("GET", "/ui/events/stream") as stream,
    ):
        lines = stream.iter_lines()
        assert any(line.startswith("data: ") for line in lines)
        server.proc.send_signal(signal.SIGTERM)
        list(lines)  # the server ends the stream instead of waiting for the tab to leave
    # uvicorn re-raises the SIGTERM once it has shut down cleanly.
    assert server.proc.wait(20) in (0, -signal.SIGTERM)
    assert b"Traceback" not in server.log.read_bytes()
