"""No response can damage a fetcher: after every refusal the same fetcher fetches normally.

libcurl keeps whatever a callback raised on its easy handle and reports it again for every later
transfer on that handle; a pooled handle that saw a refusal was the very next one used. Each case
here refuses one hostile answer, then fetches good pages and a redirect *on the same fetcher*.
The agent's fetcher is driven end to end by a real ``forager agent run``, and ``forager crawl``
with hostile pages ahead of good ones completes every good one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from forager.agents import admin
from forager.db.engine import Database
from forager.db.models import CrawlTask
from forager.errors import FetchError
from forager.fetch.base import Fetcher, FetchRequest
from forager.fetch.decode import BoundedDecoder
from forager.fetch.fetcher_set import build_fetcher
from forager.fetch.transfer import Transfers
from tests.conftest import SettingsFactory
from tests.support.agents import AgentProcess, app_server
from tests.support.bombs import MIB, bomb
from tests.support.crawling import crawl, submit, tasks_by_id
from tests.support.fetching import fetch_settings
from tests.support.hostile import OK_PAGE, REFUSALS, HostileServer
from tests.support.waiting import eventually

UA = "forager-integrity-test/1"
LIMIT = 1024 * 1024  # below every bomb's decoded size
TIMEOUT = 1.5  # the /slow answer never completes within it


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with HostileServer() as server:
        yield server


async def _ok_three_times(fetcher: Fetcher, hostile: HostileServer) -> None:
    for path in ("/ok", "/to-ok", "/ok"):
        response = await fetcher.fetch(FetchRequest(hostile.url(path), UA))
        assert response.status_code == 200 and response.body == OK_PAGE, path
        assert response.url == hostile.url("/ok")


async def _refused_then_whole(fetcher: Fetcher, hostile: HostileServer, path: str) -> None:
    """``path`` is refused as ``REFUSALS`` says; good pages and a redirect follow on the same
    fetcher."""
    with pytest.raises(FetchError) as refused:
        await fetcher.fetch(FetchRequest(hostile.url(path), UA))
    assert refused.value.error_type == REFUSALS[path], (path, str(refused.value))
    await _ok_three_times(fetcher, hostile)


@pytest.mark.parametrize("kind", ["http", "impersonate"])
@pytest.mark.parametrize("path", list(REFUSALS))
async def test_a_refusal_leaves_the_fetcher_whole(
    kind: str, path: str, hostile: HostileServer, tmp_path: Path
) -> None:
    settings = fetch_settings(tmp_path, max_body_bytes=LIMIT, fetch_timeout_seconds=TIMEOUT)
    fetcher = build_fetcher(kind, settings)
    try:
        await _ok_three_times(fetcher, hostile)
        for _ in range(2):  # twice: a second refusal on a fresh handle says the same
            await _refused_then_whole(fetcher, hostile, path)
    finally:
        await fetcher.aclose()


async def test_every_refusal_in_a_row_on_one_fetcher(
    hostile: HostileServer, tmp_path: Path
) -> None:
    """All the refusals one after the other, good pages between them, one fetcher."""
    settings = fetch_settings(tmp_path, max_body_bytes=LIMIT, fetch_timeout_seconds=TIMEOUT)
    fetcher = build_fetcher("http", settings)
    try:
        for path in REFUSALS:
            await _refused_then_whole(fetcher, hostile, path)
    finally:
        await fetcher.aclose()


async def test_a_handle_that_saw_an_error_is_not_pooled(
    hostile: HostileServer, tmp_path: Path
) -> None:
    """The pool keeps only handles whose last transfer ended well."""
    settings = fetch_settings(tmp_path, max_body_bytes=LIMIT, fetch_timeout_seconds=TIMEOUT)
    fetcher = build_fetcher("http", settings)
    try:
        transfers: Transfers = fetcher.transfers  # type: ignore[attr-defined]
        await fetcher.fetch(FetchRequest(hostile.url("/ok"), UA))
        good = list(transfers._idle)
        assert len(good) == 1
        with pytest.raises(FetchError):
            await fetcher.fetch(FetchRequest(hostile.url("/bogus-encoding"), UA))
        assert transfers._idle == [], "the handle that saw the refusal went back to the pool"
    finally:
        await fetcher.aclose()


async def test_an_agent_fetches_normally_after_hostile_pages(
    make_settings: SettingsFactory, hostile: HostileServer, tmp_path: Path
) -> None:
    """A real ``forager agent run`` with one fetch slot: the hostile tasks fail, every good one
    after them completes (before, every fetch after the first refusal failed the same way)."""
    settings = make_settings(serve_workers=0, max_body_bytes=LIMIT, fetch_timeout_seconds=TIMEOUT)
    async with app_server(settings) as (url, app):
        db: Database = app.state.runtime.db
        _, token = await admin.create_agent(db, "home-1")
        bad = await submit(db, settings, *_hostile_urls(hostile), max_retries=0, priority=1)
        good = await submit(db, settings, *_good_urls(hostile), max_retries=0, priority=5)
        agent = AgentProcess(url, token, tmp_path / "agent.log", concurrency=1)
        try:

            async def settled() -> dict[int, CrawlTask] | None:
                tasks = await tasks_by_id(db, bad + good)
                done = all(t.status in ("completed", "failed") for t in tasks.values())
                return tasks if done else None

            tasks = await eventually(settled, "every task settled", context=agent.log)
        finally:
            await agent.astop()
    _assert_outcome(tasks, bad, good)


async def test_a_worker_pool_finishes_good_pages_behind_hostile_ones(
    db: Database, make_settings: SettingsFactory, hostile: HostileServer
) -> None:
    """The issue's crawl: hostile pages first, then good ones, one fetch slot, one process."""
    settings = make_settings(max_body_bytes=LIMIT, fetch_timeout_seconds=TIMEOUT)
    bad = await submit(db, settings, *_hostile_urls(hostile), max_retries=0, priority=1)
    good = await submit(db, settings, *_good_urls(hostile), max_retries=0, priority=5)
    tasks = await crawl(db, settings, bad + good, concurrency=1, timeout=60)
    _assert_outcome(tasks, bad, good)


HOSTILE_PATHS = ("/bogus-encoding", "/bomb-br", "/corrupt-gzip", "/many-headers", "/too-big")


def _hostile_urls(server: HostileServer) -> list[str]:
    return [server.url(p) for p in HOSTILE_PATHS]


def _good_urls(server: HostileServer) -> list[str]:
    return [server.url(f"/ok?page={n}") for n in range(6)]


def _assert_outcome(tasks: dict[int, CrawlTask], bad: list[int], good: list[int]) -> None:
    assert {tasks[i].status for i in bad} == {"failed"}
    assert sorted(tasks[i].error_type or "" for i in bad) == sorted(
        REFUSALS[p] for p in HOSTILE_PATHS
    )
    failed_good = {
        tasks[i].url: tasks[i].error_message for i in good if tasks[i].status != "completed"
    }
    assert not failed_good


@pytest.mark.parametrize("codings", [("gzip",), ("deflate",), ("br",), ("zstd",), ("gzip", "br")])
def test_a_body_under_the_limit_decodes_whole_however_well_it_compressed(
    codings: tuple[str, ...],
) -> None:
    """1 MiB that compressed to a few bytes decodes to all of its 1 MiB, fed whole or in pieces
    (brotli's decoder once stopped after its first ~100 KB: the rest was pending output)."""
    wire = bomb(codings, 1)
    for step in (len(wire), 7):
        decoder = BoundedDecoder(", ".join(codings), 2 * MIB)
        for start in range(0, len(wire), step):
            decoder.feed(wire[start : start + step])
        assert decoder.finish() == b"\0" * MIB, (codings, step)
