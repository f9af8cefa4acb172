"""The first hour of a new user (issue 34): `make serve` on a port in use says what to do before
anything starts; its banner names the dashboard and the first key's command; the login page's
command, run as shown, makes a key that logs in."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import service_missing
from tests.support.cli import clean_env, forager_process, one_error_line

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("FORAGER_CHROMIUM_PATH", "/usr/bin/chromium"))


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on (loopback)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_on_a_port_in_use_says_so_before_starting_anything(
    tmp_path: Path, taken_port: int
) -> None:
    env = clean_env(tmp_path / "data")
    ran = forager_process(tmp_path, env, "serve", "--port", str(taken_port))
    line = one_error_line(ran)
    assert f"port {taken_port} on 127.0.0.1 is already in use" in line
    assert f"make serve PORT={taken_port + 1}" in line
    assert f"FORAGER_PORT={taken_port + 1} make serve" in line
    assert ran.stdout == ""  # no banner
    assert not (tmp_path / "data").exists()  # no database, no worker pool, no monitor runner


def test_make_serve_port_in_use_is_one_line_too(tmp_path: Path, taken_port: int) -> None:
    env = clean_env(tmp_path / "data")
    ran = subprocess.run(
        ["make", "-s", "serve", f"PORT={taken_port}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode != 0
    assert "Traceback" not in ran.stderr and "Errno" not in ran.stderr
    assert f"error: port {taken_port} on 127.0.0.1 is already in use" in ran.stderr
    assert not (tmp_path / "data").exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _read_banner(proc: subprocess.Popen[str], lines: int) -> list[str]:
    assert proc.stdout is not None
    banner = [proc.stdout.readline().rstrip("\n") for _ in range(lines)]
    return banner


def test_first_login_as_the_banner_and_login_page_say(tmp_path: Path) -> None:
    """`make serve PORT=…` from the repository, the banner's dashboard URL, the login page's
    command run as shown (`make apikey`), and a login with the key it printed."""
    if not CHROMIUM.exists():
        service_missing("Chromium", f"{CHROMIUM} not found")
    from playwright.sync_api import expect, sync_playwright

    env = {**clean_env(tmp_path / "data"), "FORAGER_SERVE_WORKERS": "0"}
    port = _free_port()
    proc = subprocess.Popen(
        ["make", "-s", "serve", f"PORT={port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # make and forager stop together
    )
    try:
        banner = _read_banner(proc, 3)
        url = f"http://127.0.0.1:{port}"
        assert banner[0].startswith("Forager ") and f" on {url} " in banner[0], banner
        assert banner[1] == f"Dashboard: {url}/", banner
        assert "No API key yet" in banner[2] and "`make apikey`" in banner[2], banner
        _wait_until_healthy(proc, url)

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url + "/")
                page.get_by_label("API key").wait_for()
                commands = page.locator("form.login code").all_inner_texts()
                assert commands == [
                    "make apikey",
                    ".venv/bin/forager apikey create --name admin --role admin",
                ]
                made = subprocess.run(
                    [*shlex.split(commands[0]), "-s"],
                    cwd=ROOT,  # "in Forager's folder"
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                assert made.returncode == 0, made.stderr
                key = made.stdout.strip()
                assert key.startswith("fgr_")
                page.get_by_label("API key").fill(key)
                page.get_by_role("button", name="Log in").click()
                expect(page.get_by_role("heading", name="Overview")).to_be_visible()
                expect(page.locator("#who-name")).to_have_text("admin (admin)")
            finally:
                browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_serve_with_a_key_prints_no_first_key_hint(tmp_path: Path) -> None:
    env = clean_env(tmp_path / "data")
    assert forager_process(tmp_path, env, "db", "upgrade").returncode == 0
    made = forager_process(tmp_path, env, "apikey", "create", "--name", "admin")
    assert made.returncode == 0, made.stderr
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "forager.cli", "serve", "--port", str(port)],
        cwd=tmp_path,
        env={**env, "FORAGER_SERVE_WORKERS": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        banner = _read_banner(proc, 2)
        assert banner[1] == f"Dashboard: http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "No API key yet" not in out


def test_the_readme_is_the_first_hour_and_every_link_resolves() -> None:
    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) < 60
    assert lines[2:6] == ["```sh", "make serve", "make test", "```"]
    first_login = readme.index("## First login")
    assert "make apikey" in readme[first_login:] and "http://127.0.0.1:8000/" in readme
    assert readme.index("## First crawl") > first_login
    # The rest moved to docs/ by topic: every relative link of the README and docs/ resolves.
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            assert (page.parent / target).exists(), f"{page.name}: {target}"


@contextlib.contextmanager
def _served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`forager serve` on a free port with an admin key: (base URL, key)."""
    env = {**clean_env(tmp_path / "data"), "FORAGER_SERVE_WORKERS": "0"}
    assert forager_process(tmp_path, env, "db", "upgrade").returncode == 0
    made = forager_process(tmp_path, env, "apikey", "create", "--name", "ops", "--role", "admin")
    assert made.returncode == 0, made.stderr
    port = _free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "forager.cli", "serve", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_healthy(proc, url)
        yield url, made.stdout.strip()
    finally:
        proc.terminate()
        proc.wait(30)


def test_missions_start_with_nothing_to_run_says_what_to_configure(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        service_missing("Chromium", f"{CHROMIUM} not found")
    from playwright.sync_api import expect, sync_playwright

    with _served(tmp_path) as (url, key), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url + "/missions")
            page.get_by_label("API key").fill(key)
            page.get_by_role("button", name="Log in").click()
            expect(page.get_by_role("heading", name="Missions", exact=True)).to_be_visible()
            expect(page.get_by_text("A mission is one ad-library search")).to_be_visible()
            page.get_by_role("button", name="Start").click()
            expect(page.locator("#toasts .toast.error")).to_contain_text(
                "409: nothing to run: no mission is queued"
            )
            expect(page.get_by_test_id("orchestrator-state")).to_have_text("Stopped")
        finally:
            browser.close()


def _wait_until_healthy(proc: subprocess.Popen[Any], url: str) -> None:
    """Until ``url``'s /health answers 200 (the server ``proc`` must stay up, for 120 s at most)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(url + "/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "serve did not come up"
        time.sleep(0.1)
