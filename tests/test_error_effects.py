"""Issue 31: what each ``error_type`` does is one table, ``forager.errors.EFFECTS``, and every
decision about a failed try follows it: the retry (tasks and product images), the proxy rotation,
which failures are bans, the proxy's verdict, the domain's breaker, robots.txt's "unreachable",
the agent's block and how an agent's reported failure is read.

The expected table is written out here on purpose: changing what a type does takes a change in
``errors.py`` and one here. Each decision is then driven for every type (and one outside the
table) through its own code, with the database and the fetch replaced by stand-ins.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import astuple, fields
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from forager.agents.body import failure
from forager.agents.hub import AgentHub
from forager.agents.protocol import VERSION, Result
from forager.config import Settings
from forager.domains.robots import RobotsFetch, _Failure
from forager.errors import EFFECTS, ERROR_TYPES, Effect, FetchError, HTTPStatusError, effect
from forager.politeness import bans, outcomes
from forager.proxies import health
from forager.queue import moves
from forager.worker import images, policy

# retry, rotate_proxy, proxy_verdict, site_breaker, robots_unreachable, blocks_agent, from_agent,
# http_status, lost
T, F = True, False
EXPECTED: dict[str, tuple[bool, bool, str, str, bool, bool, bool, bool, bool]] = {
    "network":       (T, F, "fault", "fail_direct", T, F, T, F, F),
    "timeout":       (T, F, "fault", "fail_direct", T, F, T, F, F),
    "http_4xx":      (F, F, "ok",    "ok",          F, F, T, T, F),
    "http_5xx":      (T, F, "ok",    "fail",        T, F, T, T, F),
    "rate_limited":  (T, T, "ban",   "fail",        F, F, T, T, F),
    "captcha":       (T, T, "ban",   "fail",        F, T, F, F, F),
    "blocked":       (T, T, "ban",   "fail",        F, T, F, F, F),
    "robots_denied": (F, F, "ok",    "none",        F, F, F, F, F),
    "too_large":     (F, F, "ok",    "none",        F, F, T, F, F),
    "parse":         (F, F, "ok",    "none",        F, F, F, F, F),
    "validation":    (F, F, "ok",    "none",        F, F, F, F, F),
    "proxy":         (T, T, "fault", "none",        F, F, T, F, F),
    "cancelled":     (F, F, "ok",    "none",        F, F, F, F, F),
    "internal":      (T, F, "ok",    "none",        F, F, F, F, F),
    "egress_denied": (F, F, "none",  "none",        F, F, T, F, F),
    "lease_expired": (F, F, "ok",    "none",        F, F, F, F, T),
}  # fmt: skip
NOTHING = (F, F, "ok", "none", F, F, F, F, F)
UNKNOWN = "not_a_type"
EVERY = [*EXPECTED, UNKNOWN]
NOW = datetime(2024, 1, 1, tzinfo=UTC)


def _row(error_type: str) -> SimpleNamespace:
    """The expected row of ``error_type`` (nothing for a type outside the table), by name."""
    names = [f.name for f in fields(Effect)]
    return SimpleNamespace(**dict(zip(names, EXPECTED.get(error_type, NOTHING), strict=True)))


@pytest.fixture
def settings() -> Settings:
    return Settings(database_url="sqlite+aiosqlite:///unused.db")


def test_the_table_is_the_expected_one() -> None:
    assert set(EXPECTED) == ERROR_TYPES
    assert {t: astuple(e) for t, e in EFFECTS.items()} == EXPECTED
    assert astuple(effect(UNKNOWN)) == NOTHING
    assert astuple(effect(None)) == NOTHING


class _Rows:
    def __init__(self, row: Any) -> None:
        self.row = row

    def one_or_none(self) -> Any:
        return self.row


class _Session:
    """Answers every statement with one row."""

    def __init__(self, row: Any = None) -> None:
        self.row = row

    async def execute(self, *_: Any, **__: Any) -> _Rows:
        return _Rows(self.row)


@pytest.mark.parametrize("error_type", EVERY)
def test_a_task_is_retried_as_the_table_says(settings: Settings, error_type: str) -> None:
    task = SimpleNamespace(id=1, retry_count=0, max_retries=3, is_recurring=False)
    ending = moves.Ending(task, "w", (), error=(error_type, "failed", None))  # type: ignore[arg-type]
    _, event, _ = moves._ending_row(settings, ending, NOW)
    assert event == ("retry_scheduled" if _row(error_type).retry else "failed")


@pytest.mark.parametrize("error_type", EVERY)
async def test_an_image_may_pass_as_the_table_says(settings: Settings, error_type: str) -> None:
    seen: list[bool] = []

    class Fetcher:
        async def fetch(self, _request: Any) -> Any:
            raise FetchError("failed", error_type=error_type)

    class Db:
        @contextlib.asynccontextmanager
        async def session(self) -> AsyncIterator[None]:
            yield None

    class Policy:
        async def failed(self, *_: Any) -> None:
            pass

    async def failed(_image: Any, _error: str, may_pass: bool) -> None:
        seen.append(may_pass)

    async def reopen() -> None:
        pass

    downloader = images.ImageDownloader.__new__(images.ImageDownloader)
    downloader.fetcher, downloader.db, downloader.policy = Fetcher(), Db(), Policy()  # type: ignore[assignment]
    downloader.settings, downloader.box = settings, None
    downloader._failed = failed  # type: ignore[method-assign]
    domain = SimpleNamespace(
        user_agent="ua", fetcher="http", auto_fetcher=None, request_profile=None
    )
    image = SimpleNamespace(url="http://shop.test/a.png", product_url="http://shop.test/a")
    await downloader._fetch(domain, image, None, None, reopen)  # type: ignore[arg-type]
    assert seen == [_row(error_type).retry]


@pytest.mark.parametrize("error_type", EVERY)
async def test_the_retry_rotates_the_proxy_as_the_table_says(
    settings: Settings, error_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    avoided: list[frozenset[int]] = []

    async def choose_proxy(*_: Any, avoid: frozenset[int], **__: Any) -> None:
        avoided.append(avoid)

    monkeypatch.setattr(policy, "choose_proxy", choose_proxy)
    fetch_policy = policy.FetchPolicy(None, settings, None, "w")  # type: ignore[arg-type]
    last = SimpleNamespace(proxy_id=7, error_type=error_type)
    await fetch_policy.choose(_Session(last), SimpleNamespace(id=1), None)  # type: ignore[arg-type]
    assert avoided == [frozenset({7}) if _row(error_type).rotate_proxy else frozenset()]


@pytest.mark.parametrize("error_type", EVERY)
def test_the_proxy_verdict_is_the_tables(error_type: str) -> None:
    expected = _row(error_type).proxy_verdict
    assert health.verdict(error_type) == expected
    # A ban the fetch itself saw (a connection reset through the proxy) is a ban, unless nothing
    # went through the proxy at all.
    assert health.verdict(error_type, ban=True) == ("none" if expected == "none" else "ban")
    assert health.verdict(None) == health.verdict(None, ban=True) == "ok"


@pytest.mark.parametrize("error_type", EVERY)
def test_a_ban_is_what_the_table_says(error_type: str) -> None:
    exc = FetchError("failed", error_type=error_type)
    assert bans.classify_error(exc) is (_row(error_type).proxy_verdict == "ban")
    assert exc.error_type == error_type  # only a 403/503 block page is re-typed


@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "proxied"])
@pytest.mark.parametrize("error_type", EVERY)
async def test_a_failed_fetch_is_counted_as_the_table_says(
    settings: Settings, error_type: str, proxied: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded: list[str] = []

    async def record_verdict(_session: Any, _proxy_id: int, outcome: str, **__: Any) -> None:
        recorded.append(f"proxy:{outcome}")

    async def domain_breaker(_self: Any, _session: Any, _domain_id: int, *, ok: bool) -> None:
        recorded.append(f"site:{'ok' if ok else 'fail'}")

    async def release(_self: Any, *_: Any) -> None:
        pass

    monkeypatch.setattr(health, "record_verdict", record_verdict)
    monkeypatch.setattr(outcomes.Outcomes, "_breaker", domain_breaker)
    monkeypatch.setattr(outcomes.Outcomes, "release", release)
    fetch_policy = policy.FetchPolicy(None, settings, None, "w")  # type: ignore[arg-type]
    proxy = SimpleNamespace(proxy_id=7, lease_owner=None) if proxied else None
    task = SimpleNamespace(id=1, domain_id=2)
    exc = FetchError("failed", error_type=error_type)
    assert await fetch_policy.failed(None, task, proxy, exc) is None  # type: ignore[arg-type]

    row = _row(error_type)
    expected = [f"proxy:{row.proxy_verdict}"] if proxied else []
    if row.site_breaker == "fail" or (row.site_breaker == "fail_direct" and not proxied):
        expected.append("site:fail")
    elif row.site_breaker == "ok":
        expected.append("site:ok")
    assert recorded == expected


@pytest.mark.parametrize("error_type", EVERY)
def test_robots_txt_is_unreachable_as_the_table_says(error_type: str) -> None:
    expected = _row(error_type).robots_unreachable
    assert RobotsFetch("http://shop.test/robots.txt", error_type=error_type).unreachable is expected
    assert _Failure(NOW, "failed", error_type).unreachable is expected


@pytest.mark.parametrize("error_type", EVERY)
async def test_an_agent_is_blocked_as_the_table_says(error_type: str) -> None:
    class Db:
        @contextlib.asynccontextmanager
        async def reader(self) -> AsyncIterator[_Session]:
            yield _Session(SimpleNamespace(error_type=error_type, error_message="no robots"))

    hub = AgentHub.__new__(AgentHub)
    hub.db = Db()  # type: ignore[assignment]
    reason = await hub._block_reason(1)
    assert reason == (f"{error_type}: no robots" if _row(error_type).blocks_agent else None)


@pytest.mark.parametrize("status", [None, 403, 503])
@pytest.mark.parametrize("error_type", EVERY)
def test_an_agents_failure_is_read_as_the_table_says(error_type: str, status: int | None) -> None:
    header = Result(
        type="result", v=VERSION, task_id=1, ok=False, status_code=status, error_type=error_type
    )
    exc = failure(header)
    row = _row(error_type)
    if status is not None and row.http_status:
        assert isinstance(exc, HTTPStatusError)
        assert exc.error_type == ("http_5xx" if status >= 500 else "http_4xx")
    else:
        assert type(exc) is FetchError
        assert exc.error_type == (error_type if row.from_agent else "network")
