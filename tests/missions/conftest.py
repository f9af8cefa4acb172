"""Fixtures of the mission tests: proxies on loopback, reference services as processes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from forager.config import Settings
from tests.conftest import SettingsFactory
from tests.missions.fleet import FAST, ServiceProcess, start_all, worker_service, writer_service
from tests.support.proxy import TestProxy
from tests.support.site import TestSite


@dataclass
class Fleet:
    """Two worker services, one writer (its own SQLite database), three proxies."""

    workers: list[ServiceProcess]
    writer: ServiceProcess
    writer_db: str
    proxies: list[TestProxy]
    site: TestSite


@pytest.fixture(scope="module")
def proxies() -> Iterator[list[TestProxy]]:
    started = [TestProxy(), TestProxy(username="scraper", password="s3cret"), TestProxy()]
    for proxy in started:
        proxy.start()
    yield started
    for proxy in started:
        proxy.stop()


@pytest.fixture(scope="module")
def fleet_processes(
    site_server: TestSite, proxies: list[TestProxy], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    writer_db = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('writer') / 'ads.db'}"
    workers = [worker_service(site_server.url()) for _ in range(2)]
    writer = writer_service(writer_db)
    try:
        start_all(*workers, writer)
        yield Fleet(workers, writer, writer_db, proxies, site_server)
    finally:
        for service in (*workers, writer):
            service.stop()


@pytest.fixture
def fleet(fleet_processes: Fleet, site: TestSite) -> Fleet:
    """The module's fleet with no faults left from an earlier test, and the site reset."""
    for worker in fleet_processes.workers:
        worker.faults()
    for proxy in fleet_processes.proxies:
        proxy.reset()
        proxy.fail = False
    return fleet_processes


@pytest.fixture
def settings(make_settings: SettingsFactory, tmp_path: Path) -> Settings:
    return make_settings(**FAST)
