"""A real Prometheus (Debian's package, ``make prometheus``) scrapes ``/metrics`` on loopback
and a monitor's series is read back through Prometheus's own HTTP API (issue 15)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from forager.app import create_app
from forager.monitors import admin
from forager.monitors.runner import MonitorRunner
from forager.runtime import Runtime
from tests.conftest import SettingsFactory, service_missing
from tests.support.site import TestSite
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Api:
    """The app served by uvicorn in a thread on a free loopback port."""

    def __init__(self, app: Any) -> None:
        self.port = _free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> _Api:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@pytest.fixture
def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        service_missing("Prometheus", "no prometheus binary (make prometheus installs it)")
    assert found is not None
    return found


# The scrape does not depend on the engine; /metrics is tested on both.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_prometheus_scrapes_a_monitors_series(
    make_settings: SettingsFactory, site: TestSite, tmp_path: Path, prometheus_binary: str
) -> None:
    settings = make_settings(serve_workers=0, monitor_claim_seconds=0.2, monitor_lease_seconds=3)
    site.set_live("prom", 41)
    runtime = await Runtime.open(settings)
    spec = admin.MonitorSpec(
        url=site.url("/live/prom"),
        selector_type="json",
        selectors={"value": "value"},
        interval_seconds=0.2,
        min_interval_seconds=0.1,
        max_interval_seconds=0.5,
    )
    monitor = await admin.create(runtime.db, settings, spec)
    parts = runtime.parts
    runner = MonitorRunner(runtime.db, settings, parts.fetchers, parts.parser, owner="prom-test")
    running = asyncio.create_task(runner.run())
    prometheus: subprocess.Popen[bytes] | None = None
    try:
        with _Api(create_app(settings)) as api:
            web = _free_port()
            (tmp_path / "prometheus.yml").write_text(
                "global:\n  scrape_interval: 1s\n"
                "scrape_configs:\n"
                "  - job_name: forager\n"
                "    metrics_path: /metrics\n"
                f"    static_configs:\n      - targets: ['127.0.0.1:{api.port}']\n"
            )
            with (tmp_path / "prometheus.log").open("wb") as log:
                prometheus = subprocess.Popen(
                    [
                        prometheus_binary,
                        f"--config.file={tmp_path / 'prometheus.yml'}",
                        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{web}",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            query = f'forager_monitor_updates_total{{monitor="{monitor.id}"}}'

            async def scraped() -> float | None:
                async with httpx.AsyncClient(timeout=5) as client:
                    try:
                        answer = await client.get(
                            f"http://127.0.0.1:{web}/api/v1/query", params={"query": query}
                        )
                    except httpx.TransportError:
                        return None
                result = answer.json()["data"]["result"] if answer.status_code == 200 else []
                value = float(result[0]["value"][1]) if result else 0.0
                return value if value >= 2 else None

            updates = await eventually(
                scraped,
                "Prometheus to hold the monitor's update counter",
                context=lambda: (tmp_path / "prometheus.log").read_text(errors="replace"),
            )
            assert updates >= 2
            async with httpx.AsyncClient(timeout=5) as client:
                series = (
                    await client.get(
                        f"http://127.0.0.1:{web}/api/v1/series",
                        params={"match[]": "{__name__=~'forager_monitor_.*'}"},
                    )
                ).json()["data"]
            labels = {key for s in series for key in s}
            assert "monitor" in labels and not labels & {"url", "host"}  # ids only
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(timeout=20)
        runner.stop()
        await asyncio.wait_for(running, 30)
        await runtime.aclose()
