"""Schemathesis against the real server with every check: no input gives a 5xx, a response
the description denies, a refusal of input the description allows or an acceptance of input it
forbids, and a 405 always says ``Allow``.

Bounded so it fits in ``make test`` (under half a minute an engine): by default the examples
phase (every operation's documented example), the fuzzing phase with one generated case an
operation, and the stateful phase (chains of operations through the description's links). The
coverage phase (each parameter's bounds and types, every undeclared method) takes minutes: a
longer hunt sets FORAGER_FUZZ_PHASES=examples,coverage,fuzzing,stateful and
FORAGER_FUZZ_EXAMPLES (25 is what an outside run uses). OPTIONS and ``Allow`` are held to the
description path by path in tests/test_api.py.

The coverage phase, when asked for, runs on PostgreSQL only: what it probes is the validation
in front of the database, the same code on both engines, and PostgreSQL is the stricter one at
the bounds (64-bit ids, text lengths). The other phases — where an engine's own refusals would
show as a 5xx (SQLite's full-text query syntax, its locking) — run on both.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from forager.apikeys import create_key
from forager.app import create_app
from forager.queue.submit import SubmitSpec, submit_urls
from forager.runtime import open_database
from tests.conftest import SettingsFactory
from tests.support.crawling import crawl
from tests.support.site import TestSite

EXAMPLES = int(os.environ.get("FORAGER_FUZZ_EXAMPLES", "1"))
PHASES = os.environ.get("FORAGER_FUZZ_PHASES", "examples,fuzzing,stateful").split(",")
# The coverage phase tries each undeclared method on every path: one (TRACE) says as much
# about 405 + Allow as five, at a fifth of the requests.
#
# One refusal no JSON Schema can state: a mission's date range must run forward and span at most
# FORAGER_MISSION_MAX_SPAN_DAYS (a rule across two fields, said in date_end's description and
# tested in tests/missions/test_missions_api.py), so that operation may also answer 422 to input
# its schema allows. Every other check stays on for it. The same for selector maps: whether a
# CSS selector, an XPath or a regex (RE2) parses is a grammar no JSON Schema states; the 422
# names the rule (tests/test_selector_parsers.py).
CONFIG = """\
[phases.coverage]
unexpected-methods = ["TRACE"]

[[operations]]
# Whether Apprise knows an apprise_url's service and form is Apprise's to say (over a hundred
# services, each its own URL grammar): no pattern can describe it, so a 422 naming the field
# is a right answer to a URL the schema's general shape allows.
include-operation-id = "create_alert_rule"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx",
]

[[operations]]
include-operation-id = "save_selector_parser"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx",
]

[[operations]]
include-operation-id = "preview_selector_parser"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx",
]

[[operations]]
include-operation-id = "compare_selector_parser"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx",
]

[[operations]]
# A crawl job's rules are RE2 patterns and CSS regions (grammars again), and it needs
# start_urls or sitemap_urls (a rule across two fields): tests/test_api_jobs.py.
include-operation-id = "start_job"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx",
]

[[operations]]
# A feed's item_kind is only for feeds of items (a rule across two fields): tests/test_feeds.py.
include-operation-id = "create_feed"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx",
]

[[operations]]
include-operation-id = "update_feed"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx",
]

[[operations]]
include-operation-id = "create_missions"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx",
]

[[operations]]
# /health answers 503 by design once it is down (the fuzzer's monitors are enabled and no
# process runs them); the description declares that 503 and its body, which the other checks
# hold it to. Schemathesis counts every 5xx as a server error unless told.
include-operation-id = "health"
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "503"]
"""


class _Server:
    """The app served by uvicorn in a thread on a free loopback port, lifespan and all."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the API server did not start")
            threading.Event().wait(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


async def _admin_key_and_a_product(settings: Any, product_url: str) -> str:
    """An admin key, and one crawled product so the links to product operations resolve."""
    db = await open_database(settings)
    try:
        [outcome] = await submit_urls(db, settings, [SubmitSpec(product_url)])
        assert outcome.task_id is not None
        await crawl(db, settings, [outcome.task_id])
        return (await create_key(db, "fuzz", "admin"))[1]
    finally:
        await db.dispose()


# A longer hunt (every phase, every check) sends some thousand requests (the coverage phase tries
# each parameter's bounds, up to 10,000-URL batches): longer than the suite's default timeout
# on a loaded machine.
@pytest.mark.timeout(900)
def test_no_5xx_and_responses_match_the_schema(
    make_settings: SettingsFactory, db_url: str, tmp_path: Path, site: TestSite
) -> None:
    settings = make_settings(serve_workers=0)
    on_sqlite = db_url.startswith("sqlite")
    phases = ",".join(p for p in PHASES if not (on_sqlite and p == "coverage"))
    key = asyncio.run(_admin_key_and_a_product(settings, site.url("/product/1")))
    with _Server(create_app(settings)) as base_url:
        # An enabled monitor that no process runs (no built-in workers): /health is down from
        # the start, so its 503 and that body are what the checks hold to the description.
        monitor = {"url": site.url("/live/fuzz"), "json_paths": {"value": "nested.value"}}
        auth = {"Authorization": f"Bearer {key}"}
        created = httpx.post(f"{base_url}/api/monitors", json=monitor, headers=auth)
        assert created.status_code == 201, created.text
        assert httpx.get(f"{base_url}/health").status_code == 503
        (tmp_path / "schemathesis.toml").write_text(CONFIG)
        result = subprocess.run(
            [
                str(Path(sys.executable).with_name("st")),
                "run",
                # One worker: schemathesis runs workers as threads, and CPython 3.11 (before
                # 3.12) can raise a spurious "AST constructor recursion depth mismatch" when
                # threads call ast.parse at once (python/cpython#106905); Hypothesis does.
                "--workers",
                "1",
                "--request-timeout",
                "30",
                f"{base_url}/openapi.json",
                "--header",
                f"Authorization: Bearer {key}",
                "--max-examples",
                str(EXAMPLES),
                "--checks",
                "all",
                "--phases",
                phases,
                # These two fetch from addresses taken from their input: never fuzz them
                # (tests must not send traffic beyond loopback).
                "--exclude-operation-id",
                "test_proxy",
                "--exclude-operation-id",
                "refresh_domain_robots",
                # Missions: these call the worker services and writers the fuzzer registered
                # (at addresses taken from its input), or start the loop that calls them.
                "--exclude-operation-id",
                "test_worker_service",
                "--exclude-operation-id",
                "test_writer",
                "--exclude-operation-id",
                "start_orchestrator",
                "--seed",
                "1",
                "--no-color",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=840,
        )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
