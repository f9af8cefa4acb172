"""The dashboard as a new user's first hour meets it (issue 34), in Chromium against a real
`forager serve`: a clean server log, bulk actions on what is selected now, every wait
explained, readable changes, sortable tables and the Overview's and pages' small truths.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.dashboard import Server, chromium, go, logged_in, serve

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
