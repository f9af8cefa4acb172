"""Seed details of issue 35: an ``internal`` failure keeps its stack trace (bounded, admin keys
only); the scraper-resilience seed's environment names work or stop the start naming them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from forager.config import load_settings
from forager.errors import ConfigError
from forager.monitors.runner import poll_timeout
from forager.parse import registry
from forager.parse.base import ProductRecord
from forager.queue.door import SubmitSpec, submit_urls
from forager.queue.moves import TRACE_LIMIT, bounded_trace
from forager.runtime import Runtime
from tests.support.crawling import crawl
from tests.support.site import TestSite


class BuggyParser:
    """A parser with a bug: the task fails ``internal`` and keeps where it broke."""

    name = "buggy"
    version = "1"

    def parse(self, html: str, url: str) -> ProductRecord:
        return _divide(len(html))


def _divide(n: int) -> Any:
    return n // 0


# Registered on import: here, and in each parse process (``parser_modules``).
registry.register(BuggyParser())


@pytest.fixture
def api_settings() -> dict[str, Any]:
    return {"parser_modules": ["tests.test_seed_details"], "parse_processes": 1}


async def test_an_internal_failure_keeps_its_trace_for_admin_keys_only(
    api: httpx.AsyncClient, site: TestSite
) -> None:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    spec = SubmitSpec(url=site.url("/product/1"), parser_name="buggy", max_retries=0)
    [outcome] = await submit_urls(runtime.db, runtime.settings, [spec])
    assert outcome.task_id is not None
    done = await crawl(runtime.db, runtime.settings, [outcome.task_id], parts=runtime.parts)
    assert done[outcome.task_id].error_type == "internal"
    path = f"/api/tasks/{outcome.task_id}"
    shown = (await api.get(path)).json()
    assert shown["error_message"] == "ZeroDivisionError: integer division or modulo by zero"
    trace = shown["error_trace"]
    assert trace.startswith("Traceback (most recent call last):")
    assert "in _divide" in trace and trace.rstrip().endswith(
        "ZeroDivisionError: integer division or modulo by zero"
    )
    read = {"Authorization": f"Bearer {api.keys['read']}"}  # type: ignore[attr-defined]
    as_reader = (await api.get(path, headers=read)).json()
    assert as_reader["error_trace"] is None and as_reader["error_message"] == shown["error_message"]
    listed = (await api.get("/api/tasks", params={"status": "failed"})).json()["items"]
    assert "error_trace" not in listed[0]  # lists never carry it

    restarted = await api.post(f"{path}/restart")
    assert restarted.status_code == 200, restarted.text
    assert (await api.get(path)).json()["error_trace"] is None


def test_a_long_trace_keeps_its_head_and_tail() -> None:
    trace = "Traceback (most recent call last):\n" + "  frame\n" * 10_000 + "ValueError: x\n"
    kept = bounded_trace(trace)
    assert len(kept) == TRACE_LIMIT
    assert kept.startswith("Traceback") and kept.endswith("ValueError: x\n") and "(cut)" in kept
    assert bounded_trace("short") == "short"


# -- the scraper-resilience seed's environment names ----------------------------------------


def test_seed_names_map_to_forager_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "DB_CONNECTION_POOL_SIZE": "7",
        "DB_CONNECTION_TIMEOUT_SECONDS": "12",
        "SELECTOR_TIMEOUT_SECONDS": "5",
        "NAVIGATION_TIMEOUT_SECONDS": "45",
        "PAGE_TIMEOUT_SECONDS": "40",
        "BROWSER_HEADLESS": "true",
        "ENABLE_PROMETHEUS_METRICS": "1",
        "ENABLE_ADAPTIVE_POLLING": "yes",
        "ENABLE_MATCH_STATE_DETECTION": "true",
        "ENABLE_ADAPTIVE_TIMEOUTS": "true",
    }.items():
        monkeypatch.setenv(f"FORAGER_{name}", value)
    s = load_settings()
    assert (s.db_pool_size, s.db_pool_timeout_seconds) == (7, 12)
    assert (s.browser_selector_timeout_seconds, s.browser_navigation_timeout_seconds) == (5, 45)
    assert poll_timeout(100, s) == 5.0  # adaptive: the floor, not the page timeout
    monkeypatch.setenv("FORAGER_ENABLE_ADAPTIVE_TIMEOUTS", "false")
    fixed = load_settings()
    assert poll_timeout(100, fixed) == poll_timeout(None, fixed) == 40.0


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("BROWSER_HEADLESS", "false", "FORAGER_BROWSER_HEADLESS=false is not supported"),
        ("ENABLE_PROMETHEUS_METRICS", "0", "FORAGER_ENABLE_PROMETHEUS_METRICS=false"),
        ("ENABLE_ADAPTIVE_POLLING", "off", "FORAGER_ENABLE_ADAPTIVE_POLLING=false"),
        ("ENABLE_MATCH_STATE_DETECTION", "no", "FORAGER_ENABLE_MATCH_STATE_DETECTION=false"),
        ("ENABLE_ADAPTIVE_TIMEOUTS", "maybe", "FORAGER_ENABLE_ADAPTIVE_TIMEOUTS: must be true"),
        ("NAVIGATION_TIMEOUT_SECONDS", "10", "NAVIGATION_TIMEOUT_SECONDS\\) must not be below"),
        ("DB_CONNECTION_POOL_SIZE", "0", "FORAGER_DB_POOL_SIZE"),
    ],
)
def test_what_cannot_be_honoured_stops_the_start_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(f"FORAGER_{name}", value)
    with pytest.raises(ConfigError, match=says):
        load_settings()


def test_the_seed_files_switches_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "forager.yaml"
    monkeypatch.setenv("FORAGER_CONFIG_FILE", str(path))
    path.write_text("scraper:\n  browser:\n    headless: true\n    timeouts: {selector: 3}\n")
    assert load_settings().browser_selector_timeout_seconds == 3
    path.write_text("scraper:\n  browser:\n    headless: false\n")
    with pytest.raises(ConfigError, match="FORAGER_BROWSER_HEADLESS=false is not supported"):
        load_settings()
