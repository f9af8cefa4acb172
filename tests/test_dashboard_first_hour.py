"""The dashboard as a new user's first hour meets it (issue 34), in Chromium against a real
`forager serve`: a clean server log, bulk actions on what is selected now, every wait
explained, readable changes, sortable tables and the Overview's and pages' small truths.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.dashboard import Server, chromium, go, logged_in, row, serve

PAGES = (
    "/",
    "/tasks",
    "/submit",
    "/domains",
    "/proxies",
    "/products",
    "/items",
    "/agents",
    "/missions",
    "/monitors",
    "/alerts",
    "/events",
)


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
    for _ in range(3):
        tabs = [logged_in(browser, server) for _ in range(3)]
        for tab in tabs:
            for path in PAGES:
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
