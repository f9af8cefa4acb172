"""Worker services and writers that answer garbage, 500s, nothing, too much, or job ids that
would leave their storage: each gets the seed's error code, and the loop goes on."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date

import httpx
import pytest
from sqlalchemy import func, select

from forager.apikeys import create_key
from forager.app import create_app
from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Proxy, WorkerService
from forager.missions import admin, control
from tests.conftest import SettingsFactory
from tests.missions.badservice import BadService
from tests.missions.fleet import (
    FAST,
    events,
    missions,
    names,
    register,
    run_until_idle,
    running,
    wait_for,
)
from tests.support.proxy import TestProxy


@pytest.fixture(scope="module")
def proxies() -> Iterator[list[TestProxy]]:
    started = [TestProxy() for _ in range(3)]
    for proxy in started:
        proxy.start()
    yield started
    for proxy in started:
        proxy.stop()


@pytest.fixture
def bad() -> Iterator[BadService]:
    with BadService() as service:
        yield service


# A call that must succeed gets a timeout no loaded machine reaches (the bad service is a thread
# of this process); a test that makes a route hang shortens it, since each hang waits it out.
HTTP_TIMEOUT = 5.0
HANG_TIMEOUT = 1.5


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(**{**FAST, "mission_http_timeout_seconds": HTTP_TIMEOUT})


def _hanging(settings: Settings) -> Settings:
    return settings.model_copy(update={"mission_http_timeout_seconds": HANG_TIMEOUT})


async def _setup(
    db: Database,
    settings: Settings,
    worker: str,
    writer: str,
    proxies: list[TestProxy],
    count: int = 1,
) -> list[int]:
    await register(db, settings, workers=[worker], writers=[writer], proxies=proxies)
    spec = admin.MissionSpec(date(2026, 6, 1), date(2026, 6, count), "all", ("pt",), True)
    created = await admin.create(db, spec, queue=True, by="test", max_span_days=31)
    return [m.id for m in created]


async def _session_failures(db: Database, at_least: int) -> list[str]:
    async def enough() -> list[str] | None:
        codes = [
            str(e.details["error_code"])
            for e in await events(db, "worker_service", 1)
            if e.event == "session_failed"
        ]
        return codes if len(codes) >= at_least else None

    found: list[str] = await wait_for(enough)
    return found


@pytest.mark.parametrize("how", ["garbage", "huge"])
async def test_a_session_status_that_is_not_one_is_error100_and_blames_the_proxy(
    db: Database, settings: Settings, bad: BadService, proxies: list[TestProxy], how: str
) -> None:
    bad.behave["GET /session/status"] = how
    await _setup(db, settings, bad.url, bad.url, proxies)
    async with running(db, settings) as runner:
        codes = await _session_failures(db, 3)
        assert runner.current is not None  # the loop is alive and still trying
    assert set(codes[:3]) == {"ERROR100"}
    async with db.reader() as session:
        blamed = await session.scalar(select(func.sum(Proxy.failure_count)))
        held = await session.scalar(
            select(func.count()).select_from(Proxy).where(Proxy.in_use_by_worker_id.is_not(None))
        )
    assert blamed is not None and blamed >= 3
    rotated = [e for e in await events(db, "worker_service", 1) if e.event == "proxy_rotated"]
    assert rotated and all(r.details["old_proxy"] != r.details["new_proxy"] for r in rotated)
    assert held == 0  # stopped: the sessions no mission used are ended
    assert [m.status for m in await missions(db)] == ["queued"]


async def test_a_session_that_never_gets_ready_times_out_with_error101(
    db: Database, make_settings: SettingsFactory, bad: BadService, proxies: list[TestProxy]
) -> None:
    settings = make_settings(
        **{
            **FAST,
            "mission_session_timeout_seconds": 0.3,
            "mission_http_timeout_seconds": HANG_TIMEOUT,
        }
    )
    bad.behave["GET /session/status"] = "hang"  # each poll times out, and so does the session
    await _setup(db, settings, bad.url, bad.url, proxies)
    async with running(db, settings):
        assert (await _session_failures(db, 1))[0] == "ERROR101"


async def test_an_unreachable_service_is_error502_and_not_the_proxy_fault(
    db: Database, settings: Settings, proxies: list[TestProxy]
) -> None:
    await _setup(db, settings, "http://127.0.0.1:9", "http://127.0.0.1:9", proxies)
    async with running(db, settings):
        codes = await _session_failures(db, 1)
    assert codes[0] == "ERROR502"
    async with db.reader() as session:
        assert await session.scalar(select(func.sum(Proxy.failure_count))) == 0
        service = await session.get(WorkerService, 1)
    assert service is not None and service.last_error_code == "ERROR502"


async def test_a_scrape_that_cannot_start_is_retried_then_error203(
    db: Database, settings: Settings, bad: BadService, proxies: list[TestProxy]
) -> None:
    bad.behave["POST /scrape"] = "500"
    [mission_id] = await _setup(db, settings, bad.url, bad.url, proxies)
    await run_until_idle(db, settings)
    [m] = await missions(db)
    assert (m.status, m.error_code, m.retry_count) == ("failed", "ERROR203", 2)
    failures = [e for e in await events(db, "mission", mission_id) if e.event == "scrape_failed"]
    assert [f.details["error_code"] for f in failures] == ["ERROR200"] * 3


async def test_a_job_answer_the_database_cannot_store_fails_the_mission_with_error500(
    db: Database,
    settings: Settings,
    bad: BadService,
    proxies: list[TestProxy],
) -> None:
    """A finished job that claims more ads than a database integer holds: writing it raises
    in every try (seed §7.1 ERROR500, which §7.2 does not retry), where the loop used to log
    and try the same step for ever. The mission fails, and the service goes on to the next."""
    bad.ads_count = 2**64
    first, second = await _setup(db, settings, bad.url, bad.url, proxies, count=2)
    await run_until_idle(db, settings)
    found = {m.id: m for m in await missions(db)}
    assert (found[first].status, found[first].error_code, found[first].retry_count) == (
        "failed",
        "ERROR500",
        0,
    )
    failed = [e.details for e in await events(db, "mission", first) if e.event == "mission_failed"]
    assert [f["error_code"] for f in failed] == ["ERROR500"]
    message = failed[0]["error_message"]  # the database's own words (see the log for more)
    assert any(why in message for why in ("too large", "out of int32 range")), message
    assert await names(db, first) == [
        "mission_queued",
        "mission_assigned",
        "scrape_started",
        "mission_failed",
    ]
    # The service let the mission go and took the next one (which fails the same way).
    assert found[second].error_code == "ERROR500"
    async with db.reader() as session:
        service = await session.scalar(select(WorkerService))
    assert service is not None and service.current_mission_id is None
    # What the API shows of it: the mission's code and its log, as the dashboard's missions
    # page draws them (its Error column and the mission's log).
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        _, key = await create_key(db, "test-reader", "read")
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://forager.test",
            headers={"Authorization": f"Bearer {key}"},
        ) as api:
            shown = (await api.get(f"/api/missions/{first}")).json()
            timeline = (await api.get(f"/api/missions/{first}/timeline")).json()
    assert (shown["status"], shown["error_code"]) == ("failed", "ERROR500")
    assert timeline[-1]["event"] == "mission_failed"
    assert timeline[-1]["details"]["error_code"] == "ERROR500"


async def test_a_job_poll_that_hangs_counts_as_failed_polls(
    db: Database, settings: Settings, bad: BadService, proxies: list[TestProxy]
) -> None:
    settings = _hanging(settings)
    bad.behave["GET /scrape/{id}"] = "hang"
    await control.update_settings(db, session_limit=None, max_retries=0)
    await _setup(db, settings, bad.url, bad.url, proxies)
    await run_until_idle(db, settings)
    [m] = await missions(db)
    assert (m.status, m.error_code) == ("failed", "ERROR203")
    assert bad.calls.count("GET /scrape/{id}") == settings.mission_poll_failure_limit


async def test_a_session_gone_when_the_scrape_is_asked_is_a_session_error_retried(
    db: Database, settings: Settings, bad: BadService, proxies: list[TestProxy]
) -> None:
    bad.behave["POST /scrape"] = "no-session"
    [mission_id] = await _setup(db, settings, bad.url, bad.url, proxies)
    await run_until_idle(db, settings)
    [m] = await missions(db)
    assert (m.status, m.error_code, m.retry_count) == ("failed", "ERROR104", 2)
    retries = [
        e.details for e in await events(db, "mission", mission_id) if e.event == "retry_triggered"
    ]
    assert [r["phase"] for r in retries] == ["session", "session"]
    # Each retry opened a new session for the mission, through another proxy.
    log = await events(db, "worker_service", 1)
    named = [e for e in log if e.event == "session_started" and e.details.get("mission_id")]
    assert len(named) == 2
    rotations = [e.details for e in log if e.event == "proxy_rotated"]
    assert rotations and {r["reason"] for r in rotations} == {"ERROR100"}


async def test_job_ids_that_would_leave_the_storage_fail_the_mission_with_error400(
    db: Database, settings: Settings, bad: BadService, proxies: list[TestProxy]
) -> None:
    hostile = ["../../etc/passwd", "job@evil.example", "a/b", "..", "job%2F..", "x?y=1"]
    bad.job_ids = list(hostile)
    ids = await _setup(db, settings, bad.url, bad.url, proxies, count=len(hostile))
    await run_until_idle(db, settings)
    assert {(m.status, m.error_code, m.retry_count) for m in await missions(db)} == {
        ("failed", "ERROR400", 0)
    }
    assert "GET /scrape/{id}" not in bad.calls  # never put in a URL
    for mission_id in ids:
        assert await names(db, mission_id) == [
            "mission_queued",
            "mission_assigned",
            "scrape_failed",
            "mission_failed",
        ]


@pytest.mark.parametrize(
    ("route", "how", "code"),
    [
        ("GET /status/{id}", "garbage", "ERROR300"),
        ("POST /process", "500", "ERROR300"),
        ("POST /process", "hang", "ERROR302"),
    ],
)
async def test_a_writer_that_misbehaves_is_resubmitted_once_then_error304(
    db: Database,
    settings: Settings,
    bad: BadService,
    proxies: list[TestProxy],
    route: str,
    how: str,
    code: str,
) -> None:
    if how == "hang":
        settings = _hanging(settings)
    bad.behave[route] = how
    [mission_id] = await _setup(db, settings, bad.url, bad.url, proxies)
    await run_until_idle(db, settings)
    [m] = await missions(db)
    assert (m.status, m.error_code, m.retry_count) == ("failed", "ERROR304", 1)
    failures = [
        e.details for e in await events(db, "mission", mission_id) if e.event == "writer_failed"
    ]
    assert [f["error_code"] for f in failures] == [code, code]
