"""The dashboard as a new user's first hour meets it (issue 34), in Chromium against a real
`forager serve`: a clean server log, bulk actions on what is selected now, every wait
explained, readable changes, sortable tables and the Overview's and pages' small truths.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from forager.web import router
from tests.support.dashboard import Server, chromium, go, logged_in, row, serve

# Every page of the dashboard's menu.
PAGES = router.PAGES + router.MISSION_PAGES + router.MONITOR_PAGES + router.ALERT_PAGES


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # The log level at its default: the log a user reads is the one checked.
    with serve(tmp_path_factory.mktemp("first-hour"), FORAGER_LOG_LEVEL=None) as running:
        yield running


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def admin(browser: Any, server: Server) -> Iterator[Any]:
    page = logged_in(browser, server)
    yield page
    page.context.close()


def _log_problems(server: Server) -> list[str]:
    text = server.log.read_text(errors="replace")
    return [
        line
        for line in text.splitlines()
        if re.search(r"\bERROR\b|Traceback|Task was destroyed", line)
    ]


def test_closing_dashboard_tabs_leaves_no_error_in_the_server_log(
    browser: Any, server: Server
) -> None:
    """Every page in tabs that open and close while the live stream runs: the server's log at
    its default level stays free of ERROR lines and tracebacks."""
    from playwright.sync_api import expect

    for url in (server.site.url(f"/product/{n}") for n in range(900, 905)):
        server.task(url)
    for _ in range(2):  # each round: every page, over three tabs that then close
        tabs = [logged_in(browser, server) for _ in range(3)]
        for n, tab in enumerate(tabs):
            for path in PAGES[n :: len(tabs)]:
                go(tab, path)
                expect(tab.locator("#live")).to_have_text("live")
        for tab in tabs:
            tab.context.close()
    # The streams' ends are seen by the server within a snapshot or two; the server keeps
    # working meanwhile (these requests allocate, so its garbage collector runs too).
    for _ in range(40):
        assert server.api.get("/api/stats").status_code == 200
    server.wait("/api/tasks?status=completed", lambda body: body["total"] >= 5)
    assert _log_problems(server) == []


def _settled(page: Any) -> None:
    """Two live snapshots later: the list has redrawn for the tasks just submitted (a redraw
    under the pointer would take a click meant for a row)."""
    for _ in range(2):
        seen = page.evaluate("document.body.dataset.liveAt")
        page.wait_for_function("(seen) => document.body.dataset.liveAt !== seen", arg=seen)
    page.wait_for_timeout(400)  # the list's refetch follows a snapshot by 300 ms


def test_bulk_actions_act_on_the_current_selection_and_name_their_buttons(
    admin: Any, server: Server
) -> None:
    """A bulk Pause clears the selection, so the Cancel after it reaches only the rows ticked
    for it; its dialog's buttons say "Cancel 2 tasks" and "Keep them"; a bulk action skips the
    selected rows it does not apply to."""
    from playwright.sync_api import expect

    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    a, b, c, d = (
        server.task(server.site.url(f"/product/{n}"), scheduled_at=later, batch_name="stale")["id"]
        for n in range(910, 914)
    )
    go(admin, "/tasks?batch_name=stale")
    expect(admin.locator("tr[data-task-id]")).to_have_count(4)
    _settled(admin)
    bar = admin.get_by_role("group", name="Actions on selected tasks")
    for task_id in (a, b):
        row(admin, task_id).get_by_role("checkbox").check()
    expect(admin.get_by_test_id("selected-count")).to_have_text("2 selected")
    bar.get_by_role("button", name="Pause", exact=True).click()
    expect(row(admin, b).locator("[data-status]")).to_have_text("paused")
    expect(admin.get_by_test_id("selected-count")).to_have_text("none selected")
    expect(admin.locator("tbody input[type=checkbox]:checked")).to_have_count(0)

    for task_id in (c, d):
        row(admin, task_id).get_by_role("checkbox").check()
    bar.get_by_role("button", name="Cancel", exact=True).click()
    dialog = admin.get_by_role("dialog")
    expect(dialog).to_contain_text("Cancel 2 tasks?")
    assert dialog.get_by_role("button").all_text_contents() == ["Keep them", "Cancel 2 tasks"]
    dialog.get_by_role("button", name="Keep them").click()
    assert server.api.get(f"/api/tasks/{c}").json()["status"] == "pending"
    bar.get_by_role("button", name="Cancel", exact=True).click()
    dialog.get_by_role("button", name="Cancel 2 tasks").click()
    expect(row(admin, d).locator("[data-status]")).to_have_text("cancelled")
    statuses = {t: server.api.get(f"/api/tasks/{t}").json()["status"] for t in (a, b, c, d)}
    assert statuses == {a: "paused", b: "paused", c: "cancelled", d: "cancelled"}

    # Resume on a paused and a cancelled row: only the paused one is resumed.
    for task_id in (a, c):
        row(admin, task_id).get_by_role("checkbox").check()
    bar.get_by_role("button", name="Resume", exact=True).click()
    expect(admin.locator(".toast").last).to_contain_text("resume: 1 of 1 done")
    expect(row(admin, a).locator("[data-status]")).not_to_have_text("paused")
    assert server.api.get(f"/api/tasks/{c}").json()["status"] == "cancelled"


def _domain_id(server: Server, name: str = "127.0.0.1") -> int:
    found = server.api.get("/api/domains", params={"q": name}).json()["items"]
    match = [d["id"] for d in found if d["domain_name"] == name]
    if match:
        return match[0]
    created = server.api.post(
        "/api/domains", json={"domain_name": name, "base_url": server.site.url("/").rstrip("/")}
    )
    assert created.status_code == 201, created.text
    domain_id: int = created.json()["id"]
    return domain_id


def test_the_submit_page_says_a_duplicate_was_not_applied_and_crawls_it_again_when_asked(
    admin: Any, server: Server
) -> None:
    """A URL submitted again answers ``duplicate`` with what was not applied and how to crawl it
    again; ticked "Crawl again if done", the finished task is restarted with the new options."""
    from playwright.sync_api import expect

    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    url = server.site.url("/product/930")
    task_id = server.task(url, scheduled_at=later)["id"]
    server.api.post(f"/api/tasks/{task_id}/cancel").raise_for_status()

    go(admin, "/submit")
    admin.locator("#submit-urls").fill(url)
    admin.locator("input[name=priority]").fill("2")
    admin.get_by_role("button", name="Submit").click()
    result = admin.locator("tr[data-result=duplicate]")
    expect(result).to_contain_text("not applied: priority 2")
    expect(result).to_contain_text("restart")
    assert server.api.get(f"/api/tasks/{task_id}").json()["status"] == "cancelled"

    admin.get_by_test_id("submit-again").check()
    admin.get_by_role("button", name="Submit").click()
    expect(admin.locator("tr[data-result=duplicate]")).to_contain_text("restarted")
    task = server.api.get(f"/api/tasks/{task_id}").json()
    assert task["priority"] == 2 and task["status"] != "cancelled"  # back in the queue, or done


def test_a_slow_batch_says_why_it_waits_with_a_bar_and_an_estimated_end(
    admin: Any, server: Server
) -> None:
    """The domain's crawl delay is named with its figure on the batch's tasks and on the
    Overview, beside a progress bar; once tasks finish, an estimated end is given."""
    from playwright.sync_api import expect

    domain_id = _domain_id(server)
    assert server.api.patch(f"/api/domains/{domain_id}", json={"crawl_delay_seconds": 4}).is_success
    try:
        for n in range(920, 926):
            server.task(server.site.url(f"/product/{n}"), batch_name="slow-shop")
        go(admin, "/tasks?batch_name=slow-shop")
        progress = admin.get_by_test_id("progress")
        expect(progress.get_by_test_id("progress-summary")).to_contain_text(
            re.compile(r"Batch slow-shop: \d of 6 done")
        )
        expect(progress.locator("li[data-domain='127.0.0.1']")).to_contain_text(
            re.compile(r"crawl delay 4 s per domain → at most 15 pages/min; [1-6] pending")
        )
        expect(progress.get_by_test_id("progress-bar")).to_have_attribute("max", "6")
        expect(progress.get_by_test_id("progress-summary")).to_contain_text("estimated end")
        go(admin, "/")
        overview = admin.get_by_test_id("progress")
        expect(overview.get_by_test_id("progress-summary")).to_contain_text("Queue:")
        expect(overview.locator("li[data-domain='127.0.0.1']")).to_contain_text(
            "crawl delay 4 s per domain"
        )
        go(admin, "/domains")
        expect(
            admin.locator("tr[data-domain='127.0.0.1']").get_by_test_id("domain-wait")
        ).to_contain_text("crawl delay 4 s per domain → at most 15 pages/min")
    finally:
        server.api.patch(f"/api/domains/{domain_id}", json={"crawl_delay_seconds": 0})


def test_overview_lists_the_alerts_sent_and_fits_1280_px(admin: Any, server: Server) -> None:
    """The Overview's Alerts panel shows the deliveries the Alerts page lists (it said "No
    alerts." beside two), and at 1280 px its workers table shows Last seen and the chart's
    last time label is whole."""
    from playwright.sync_api import expect

    rule = server.api.post(
        "/api/alerts/rules",
        json={"name": "hour failures", "kind": "task_failed", "webhook_url": server.url + "/x"},
    )
    assert rule.status_code == 201, rule.text
    failing = server.task(server.site.url("/status/404?first-hour-alert"))
    server.wait_task(failing["id"], lambda t: t["status"] == "failed")
    server.wait("/api/alerts/deliveries", lambda page: page["total"] >= 1)
    go(admin, "/")
    alerts = admin.get_by_test_id("alerts")
    expect(alerts).to_contain_text("hour failures")
    expect(alerts).to_contain_text("task_failed")
    expect(alerts).not_to_contain_text("No alerts")

    admin.set_viewport_size({"width": 1280, "height": 900})
    last_seen = admin.get_by_role("columnheader", name="Last seen")
    expect(last_seen).to_be_visible()
    box = last_seen.bounding_box()
    wrap = admin.locator(".table-wrap", has=last_seen).bounding_box()
    assert box and wrap and box["x"] + box["width"] <= wrap["x"] + wrap["width"] + 1
    # The chart's last label ends inside the chart (it was cut: "06:21 PI").
    inside = admin.evaluate(
        """() => { const svg = document.querySelector('svg.chart');
        const labels = [...svg.querySelectorAll('text')];
        const width = svg.viewBox.baseVal.width;
        return labels.every((t) => {
          const b = t.getBBox(); return b.x >= 0 && b.x + b.width <= width; }); }"""
    )
    assert inside


def test_product_pages_one_price_a_diff_an_empty_search_and_a_sku(
    admin: Any, server: Server
) -> None:
    from playwright.sync_api import expect

    task = server.task(server.site.url("/product/931"))
    server.wait_task(task["id"], lambda t: t["status"] == "completed")
    go(admin, "/products?q=SKU-931")  # the SKU, not a word of the name
    found = admin.get_by_role("link", name="Test Product 931")
    expect(found).to_be_visible()
    found.click()
    expect(admin.get_by_test_id("single-price")).to_contain_text("One price so far: 431.99")
    expect(admin.get_by_test_id("price-chart").locator("svg")).to_have_count(0)
    expect(admin.get_by_role("heading", name="Images")).to_be_visible()
    assert "null" not in admin.locator("main").inner_text()

    httpx.post(server.site.url("/__price/931"), json={"price": "400.00"}).raise_for_status()
    server.api.post(f"/api/tasks/{task['id']}/restart")
    server.wait_task(
        task["id"],
        lambda t: (
            t["status"] == "completed" and sum(a["phase"] == "fetch" for a in t["attempts"]) >= 2
        ),
    )
    admin.reload()
    changes = admin.get_by_role("table", name="Price history changes")
    expect(changes.locator("[data-change=price]")).to_contain_text(
        "price 431.99 USD → 400.00 USD (−31.99, −7.4 %)"
    )
    expect(changes.locator("tbody tr").last).to_contain_text("first seen")
    expect(admin.get_by_test_id("price-chart").locator("svg")).to_have_attribute("data-points", "2")

    go(admin, "/products?q=nothing-sells-this-zzz")
    expect(admin.get_by_test_id("no-products")).to_have_text("No products match this search.")
    expect(admin.get_by_test_id("page-info")).to_have_count(0)
    expect(admin.get_by_role("table", name="Products")).to_have_count(0)


def test_a_monitor_reading_a_price_as_text_is_charted_with_its_changes(
    admin: Any, server: Server
) -> None:
    from playwright.sync_api import expect

    price = server.site.url("/__price/94")
    httpx.post(price, json={"price": "194.05"}, timeout=10).raise_for_status()
    go(admin, "/monitors")
    admin.get_by_label("URL", exact=True).fill(server.site.url("/product/94"))
    admin.get_by_label("Name", exact=True).fill("text price")
    admin.get_by_label("Reads").select_option("css")
    admin.get_by_label("Fields (name = selector, one a line) or parser").fill(
        "price = .price-box .price"
    )
    admin.get_by_label("Interval (s)").fill("0.5")
    admin.get_by_role("button", name="Create monitor").click()
    row = admin.locator("tr[data-monitor]").filter(has_text="text price")
    expect(row).to_contain_text("1 /")
    row.get_by_role("button", name="text price").click()
    expect(admin.get_by_test_id("single-value")).to_contain_text("price: $194.05")
    httpx.post(price, json={"price": "189.90"}, timeout=10).raise_for_status()
    expect(row).to_contain_text("2 /")
    row.get_by_role("button", name="text price").click()
    expect(admin.get_by_role("img", name="price over time")).to_have_attribute("data-points", "2")
    expect(admin.get_by_text("price: 2 values seen, 1 change")).to_be_visible()
    newest = admin.get_by_role("table", name="Changes").locator("tbody tr").first
    expect(newest.locator("li[data-field=price]")).to_have_text("price: $194.05 → $189.90")
    # Memory is the process's, said once for the process, not as each monitor's.
    expect(admin.get_by_role("columnheader", name="Memory")).to_have_count(0)
    expect(admin.get_by_test_id("monitor-processes")).to_contain_text("for 1 monitor")
    monitor_id = row.get_attribute("data-monitor")
    server.api.delete(f"/api/monitors/{monitor_id}")


def test_an_alert_rule_picks_its_domain_and_product_by_name(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    task = server.task(server.site.url("/product/941"))
    server.wait_task(task["id"], lambda t: t["status"] == "completed")
    product_id = server.api.get("/api/products", params={"q": "SKU-941"}).json()["items"][0]["id"]
    domain_id = _domain_id(server)
    go(admin, "/alerts")
    admin.get_by_label("Name", exact=True).fill("kettle cheaper")
    admin.get_by_label("When").select_option("price_below")
    admin.get_by_label("Amount").fill("500")
    admin.get_by_label("Domain", exact=True).select_option(label="127.0.0.1")
    admin.get_by_label("Product", exact=True).fill("Test Product 941")
    option = admin.locator("#alert-products option")
    expect(option).to_have_attribute("value", f"Test Product 941 (#{product_id})")
    admin.get_by_label("Product", exact=True).fill(f"Test Product 941 (#{product_id})")
    admin.get_by_label("Target URL").fill(f"{server.url}/hook")
    admin.get_by_role("button", name="Create rule").click()
    rule = admin.locator("tr[data-rule='kettle cheaper']")
    port = server.url.rpartition(":")[2]
    expect(rule).to_contain_text(f"webhook: http://127.0.0.1:{port}/…")
    expect(rule).to_contain_text("domain 127.0.0.1")
    expect(rule.get_by_role("link", name=f"product #{product_id}")).to_be_visible()
    [saved] = [
        r
        for r in server.api.get("/api/alerts/rules").json()["items"]
        if r["name"] == "kettle cheaper"
    ]
    assert (saved["domain_id"], saved["product_id"]) == (domain_id, product_id)


def test_products_and_tasks_sort_by_clicking_a_column_header(admin: Any, server: Server) -> None:
    from playwright.sync_api import expect

    tasks = [
        server.task(server.site.url(f"/product/{n}"), batch_name="sorting") for n in (951, 952)
    ]
    for task in tasks:
        server.wait_task(task["id"], lambda t: t["status"] == "completed")
    go(admin, "/products?q=Test+Product")
    admin.get_by_role("button", name="Price").click()
    expect(admin).to_have_url(re.compile(r"sort=-price"))
    header = admin.get_by_role("columnheader", name=re.compile("Price"))
    expect(header).to_have_attribute("aria-sort", "descending")

    def prices() -> list[float]:
        cells = admin.locator("table[aria-label=Products] tbody tr td:nth-child(2)")
        texts = [t.split()[0] for t in cells.all_inner_texts() if t.strip() != "—"]
        return [float(t) for t in texts]

    expect(admin.locator("table[aria-label=Products] tbody tr").first).to_be_visible()
    high = prices()
    assert len(high) >= 2 and high == sorted(high, reverse=True)
    admin.get_by_role("button", name=re.compile("Price")).click()
    expect(admin).to_have_url(re.compile(r"sort=price(&|$)"))
    expect(header).to_have_attribute("aria-sort", "ascending")
    low = prices()
    assert low == sorted(low) and low[0] == min(high)

    # Tasks by last update: the one restarted last comes first, newest first.
    go(admin, "/tasks?batch_name=sorting")
    expect(admin.locator("tr[data-task-id]")).to_have_count(2)
    assert server.api.post(f"/api/tasks/{tasks[0]['id']}/restart").status_code == 200
    server.wait_task(
        tasks[0]["id"], lambda t: t["status"] == "completed" and t["recrawl_count"] >= 0
    )
    admin.get_by_role("button", name="Updated").click()
    expect(admin).to_have_url(re.compile(r"sort=-updated"))
    expect(admin.locator("tr[data-task-id]").first).to_have_attribute(
        "data-task-id", str(tasks[0]["id"])
    )
    admin.get_by_role("button", name=re.compile("^Task")).click()
    expect(admin).to_have_url(re.compile(r"sort=-created"))
    expect(admin.locator("tr[data-task-id]").first).to_have_attribute(
        "data-task-id", str(tasks[1]["id"])
    )


def test_a_selector_parser_is_compared_with_the_parser_in_use_before_it_is_saved(
    admin: Any, server: Server
) -> None:
    """Rules for name, price, currency, SKU and brand: with "fallback": false the comparison
    shows availability lost on the stored pages and Save asks first; with the fallback (the
    default) nothing is lost and Save asks nothing."""
    from playwright.sync_api import expect

    task = server.task(server.site.url("/product/961"))
    domain_id = server.wait_task(task["id"], lambda t: t["status"] == "completed")["domain_id"]
    before = server.api.get(f"/api/domains/{domain_id}").json()["parser_name"]
    five = {
        "product_name": {"css": "h1.product-title"},
        "price": {"css": ".price-box .price", "post": ["price"]},
        "currency": {"jsonld": "Product:offers.priceCurrency"},
        "sku": {"jsonld": "Product:sku"},
        "brand": {"jsonld": "Product:brand.name"},
    }
    go(admin, f"/domains/{domain_id}/parser")
    rules = admin.get_by_label("Rules (JSON)")
    rules.fill(json.dumps({**five, "fallback": False}))
    expect(admin.get_by_test_id("lost-fields")).to_contain_text("availability")
    comparison = admin.get_by_role("table", name="Comparison")
    expect(comparison.locator("tr[data-compare-field=sku] td").nth(4)).not_to_have_text("0")
    mine = admin.locator(f"details[data-task='{task['id']}']")
    mine.locator("summary").click()
    lost = mine.locator("tr[data-field=availability]")
    expect(lost).to_have_attribute("data-verdict", "lost")
    expect(lost.locator("td.value").first).to_have_text("InStock")
    expect(mine.locator("tr[data-field=sku]")).to_have_attribute("data-verdict", "same")

    admin.get_by_role("button", name="Save as new version").click()
    dialog = admin.get_by_role("dialog")
    expect(dialog).to_contain_text(re.compile(r"loses [a-z_, ]*availability"))
    dialog.get_by_role("button", name="Go back").click()
    assert server.api.get(f"/api/domains/{domain_id}/selector-parsers").json()["total"] == 0

    rules.fill(json.dumps(five))
    expect(admin.get_by_role("table", name="Comparison")).to_be_visible()
    expect(admin.get_by_text("Loses no field.")).to_be_visible()
    admin.get_by_role("button", name="Save as new version").click()
    expect(admin.locator('tr[data-version="1"]')).to_contain_text("yes")
    expect(admin.get_by_role("dialog")).to_be_hidden()
    # The other tests of this module crawl the same host with its usual parser.
    assert server.api.patch(f"/api/domains/{domain_id}", json={"parser_name": before}).is_success


def test_the_whole_session_left_no_error_in_the_server_log(browser: Any, server: Server) -> None:
    """Runs last in this module: every page above, tabs closed, tasks failed on purpose, alerts
    refused by their receiver — and the log at the default level has no ERROR or traceback."""
    logged_in(browser, server).context.close()
    for _ in range(20):
        assert server.api.get("/api/progress").status_code == 200
    assert _log_problems(server) == []
