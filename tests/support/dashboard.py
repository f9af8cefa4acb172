"""A real `forager serve` for the dashboard's browser tests, and the Chromium helpers they share.

The server's built-in workers crawl the loopback test site; its output goes to a log file the
tests can read (``Server.log``). Screenshots go to docs/screenshots/.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from cryptography.fernet import Fernet

from forager.apikeys import create_key
from forager.config import load_settings
from forager.runtime import open_database
from tests.conftest import service_missing
from tests.support.site import SiteProcess

CHROMIUM = Path(os.environ.get("FORAGER_CHROMIUM_PATH", "/usr/bin/chromium"))  # as the fetcher
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
WIDTHS = (1280, 390)
WAIT_MS = 15_000


@dataclass
class Server:
    url: str
    keys: dict[str, str]
    site: SiteProcess
    api: httpx.Client  # Bearer admin key
    proc: subprocess.Popen[bytes]
    log: Path

    def task(self, url: str, **options: Any) -> dict[str, Any]:
        """A new task for ``url``: a module's tests share one server, so each uses URLs of
        its own (a known URL would return another test's task, 200)."""
        response = self.api.post("/api/tasks", json={"url": url, **options})
        assert response.status_code == 201, response.text
        task: dict[str, Any] = response.json()["task"]
        return task

    def wait(self, path: str, done: Callable[[Any], bool]) -> Any:
        """GET ``path`` until ``done`` says yes of its JSON (30 s at the most); that JSON."""
        deadline = time.monotonic() + 30
        while True:
            body = self.api.get(path).json()
            if done(body):
                return body
            assert time.monotonic() < deadline, f"{path} never became so: {str(body)[:300]}"
            time.sleep(0.1)

    def wait_task(self, task_id: int, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        task: dict[str, Any] = self.wait(f"/api/tasks/{task_id}", done)
        return task


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# The fast settings of the browser tests' servers (a test module may override any).
FAST = {
    "FORAGER_SERVE_WORKERS": "4",
    "FORAGER_POLL_SECONDS": "0.05",
    "FORAGER_SCHEDULER_SECONDS": "0.5",
    "FORAGER_HEARTBEAT_SECONDS": "1",
    "FORAGER_RETRY_BASE_SECONDS": "0.05",
    "FORAGER_RETRY_MAX_SECONDS": "0.5",
    "FORAGER_DEFAULT_CRAWL_DELAY_SECONDS": "0",
    "FORAGER_IMAGE_POLL_SECONDS": "0.2",
    "FORAGER_LOG_LEVEL": "WARNING",
}


@contextlib.contextmanager
def serve(tmp: Path, **settings: str | None) -> Iterator[Server]:
    """``forager serve`` on a free port with a SQLite database in ``tmp`` (or
    FORAGER_TEST_E2E_DATABASE_URL), an admin and a read key; ``settings`` override FAST
    (``None`` leaves a setting at its default)."""
    if not CHROMIUM.exists():
        service_missing("Chromium", f"{CHROMIUM} not found")
    env = {
        **os.environ,
        # SQLite by default; the server side is tested on both engines in test_dashboard.py.
        "FORAGER_DATABASE_URL": os.environ.get(
            "FORAGER_TEST_E2E_DATABASE_URL", f"sqlite+aiosqlite:///{tmp / 'forager.db'}"
        ),
        "FORAGER_DATA_DIR": str(tmp / "data"),
        "FORAGER_SECRET_KEY": Fernet.generate_key().decode(),
    }
    for name, value in {**FAST, **settings}.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    config = load_settings(
        database_url=env["FORAGER_DATABASE_URL"],
        data_dir=tmp / "data",
        secret_key=env["FORAGER_SECRET_KEY"],
    )

    async def make_keys() -> dict[str, str]:
        db = await open_database(config)
        try:
            return {r: (await create_key(db, f"e2e-{r}", r))[1] for r in ("admin", "read")}
        finally:
            await db.dispose()

    keys = asyncio.run(make_keys())
    site = SiteProcess(hosts=["127.0.0.1"])
    site.start()
    port = _free_port()
    log = (tmp / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "forager.cli", "serve", "--port", str(port)],
        env=env,
        cwd=tmp,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {keys['admin']}"})
    try:
        deadline = time.monotonic() + 180  # a safety net for a loaded machine
        while True:
            try:
                if api.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp / "serve.log").read_text())
            time.sleep(0.1)
        yield Server(url, keys, site, api, proc, tmp / "serve.log")
    finally:
        api.close()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        site.stop()


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium through Playwright, with expectations that wait WAIT_MS."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
        yield browser
        browser.close()


def logged_in(browser: Any, server: Server, role: str = "admin", width: int = 1280) -> Any:
    """A new tab in a new context, logged in with the ``role`` key, on the Overview."""
    context = browser.new_context(
        viewport={"width": width, "height": 900}, timezone_id="America/Sao_Paulo"
    )
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.goto(server.url + "/")
    page.get_by_label("API key").fill(server.keys[role])
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("heading", name="Overview").wait_for()
    return page


def shoot(page: Any, name: str) -> None:
    """``docs/screenshots/<name>-<width>.png`` at each width."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("document.getElementById('toasts').replaceChildren()")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(150)  # layout settles after the resize
        page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def go(page: Any, path: str) -> None:
    """Navigate inside the app (no reload), like following a link."""
    page.evaluate(
        "(url) => { history.pushState(null, '', url); dispatchEvent(new PopStateEvent('popstate')); }",  # noqa: E501
        path,
    )


def row(page: Any, task_id: int) -> Any:
    return page.locator(f'tr[data-task-id="{task_id}"]')
