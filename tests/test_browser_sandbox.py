"""Chromium runs with its sandbox, and never as root: the renderer's process says so.

The browser fetcher's Chromium processes are found under this process in /proc; each one's
user, command line and seccomp mode are read from there.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from forager.config import Settings
from forager.errors import FetchError
from forager.fetch.base import FetchRequest
from forager.fetch.browser import BrowserFetcher
from tests.support.fetching import fetch_settings, require
from tests.support.site import TestSite

UA = "forager-sandbox-test/1"


@pytest.fixture(autouse=True)
def chromium() -> None:
    require("browser")


def _settings(tmp_path: Path, **overrides: Any) -> Settings:
    return fetch_settings(tmp_path, **({"fetch_timeout_seconds": 30.0} | overrides))


def _descendants() -> list[dict[str, Any]]:
    """Every process below this one: pid, uid, command line, seccomp mode."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[1])
    mine, found = {os.getpid()}, True
    while found:
        found = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                found = True
    processes = []
    for pid in mine - {os.getpid()}:
        try:
            status = dict(
                line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            )
            argv = [
                a.decode(errors="replace")
                for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if a
            ]
        except OSError:
            continue
        if len(argv) == 1:  # Chromium's helpers rewrite their title as one spaced string
            argv = argv[0].split(" ")
        processes.append(
            {
                "pid": pid,
                "uid": int(status["Uid"].split()[0]),
                "seccomp": int(status.get("Seccomp", "0").strip()),
                "argv": argv,
            }
        )
    return processes


def _chromium(processes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in processes if p["argv"] and "chrom" in Path(p["argv"][0]).name]


async def test_renderers_are_sandboxed_and_not_root(site: TestSite, tmp_path: Path) -> None:
    fetcher = BrowserFetcher(_settings(tmp_path))
    try:
        page = await fetcher.fetch(FetchRequest(site.url("/product/3"), UA))
        assert "Test Product 3" in page.text
        chromium = _chromium(_descendants())
    finally:
        await fetcher.aclose()
    renderers = [p for p in chromium if "--type=renderer" in p["argv"]]
    assert renderers, chromium
    for process in chromium:
        assert "--no-sandbox" not in process["argv"], process
        assert process["uid"] != 0, process
    for renderer in renderers:
        assert renderer["seccomp"] == 2, renderer  # a seccomp-bpf filter: the sandbox is on
    if os.geteuid() == 0:
        browser_user = _settings(tmp_path).browser_user
        assert {p["uid"] for p in chromium} == {pwd.getpwnam(browser_user).pw_uid}


async def test_no_sandbox_only_when_the_operator_says_so(site: TestSite, tmp_path: Path) -> None:
    fetcher = BrowserFetcher(_settings(tmp_path, browser_no_sandbox=True))
    try:
        await fetcher.fetch(FetchRequest(site.url("/product/4"), UA))
        chromium = _chromium(_descendants())
    finally:
        await fetcher.aclose()
    assert any("--no-sandbox" in p["argv"] for p in chromium), chromium


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root Forager drops to another user")
async def test_a_missing_browser_user_is_a_clear_error(site: TestSite, tmp_path: Path) -> None:
    fetcher = BrowserFetcher(_settings(tmp_path, browser_user="no-such-forager-user"))
    try:
        with pytest.raises(FetchError) as caught:
            await fetcher.fetch(FetchRequest(site.url("/product/5"), UA))
    finally:
        await fetcher.aclose()
    assert caught.value.error_type == "internal"
    assert "FORAGER_BROWSER_USER" in caught.value.message
    assert "no-such-forager-user" in caught.value.message
