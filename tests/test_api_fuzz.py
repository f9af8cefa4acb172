"""Schemathesis against the real server: no input gives a 5xx or a response the schema denies.

Bounded: a few examples per operation (FORAGER_FUZZ_EXAMPLES, default 15) so it fits in
``make test``; raise it for a longer hunt.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import uvicorn

from forager.api.app import create_app
from forager.apikeys import create_key
from forager.runtime import open_database
from tests.conftest import SettingsFactory

EXAMPLES = int(os.environ.get("FORAGER_FUZZ_EXAMPLES", "15"))


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


async def _admin_key(settings: Any) -> str:
    db = await open_database(settings)
    try:
        return (await create_key(db, "fuzz", "admin"))[1]
    finally:
        await db.dispose()


def test_no_5xx_and_responses_match_the_schema(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    settings = make_settings(serve_workers=0)
    key = asyncio.run(_admin_key(settings))
    with _Server(create_app(settings)) as base_url:
        result = subprocess.run(
            [
                str(Path(sys.executable).with_name("st")),
                "run",
                f"{base_url}/openapi.json",
                "--header",
                f"Authorization: Bearer {key}",
                "--max-examples",
                str(EXAMPLES),
                "--checks",
                "not_a_server_error,response_schema_conformance,status_code_conformance,"
                "content_type_conformance",
                "--phases",
                "examples,fuzzing",
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
            timeout=600,
        )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
