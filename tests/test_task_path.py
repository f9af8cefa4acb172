"""The task path's group writer and parse processes, on SQLite and PostgreSQL.

- A task paused, cancelled or re-leased while its result waits in the writer's group is
  recorded as a ``discarded`` attempt and nothing else of it is written; the others complete.
- A domain's tasks stay claimable (PostgreSQL) while a group of its finished tasks is written.
- A group whose transaction fails (a cut connection) is written again: nothing lost, nothing
  completed twice.
- A page whose parse runs over ``FORAGER_PARSE_TIMEOUT_SECONDS`` fails ``parse`` saying so, its
  parse process is replaced, and the API answers ``/health`` all the while.
- A recrawl that finds the same content moves ``products.last_crawled_at`` (not ``updated_at``).
- A worker's concurrency counts requests: once a page has come back, the next request goes out
  while that page is parsed and written, the domain's ``max_concurrent_requests`` still holds
  at the site, and no more than the concurrency again wait past their request.
- Parse processes run as batch work (Linux), ``FORAGER_PARSE_NICE`` steps below the event loop:
  waking one does not preempt the event loop, and the loop gets a core first.
"""

from __future__ import annotations

import asyncio
import gzip
import os
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import event, func, select, update

from forager.app import create_app
from forager.config import Settings, load_settings
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlTask, Event, Product
from forager.db.types import utcnow
from forager.parse import registry
from forager.parse.base import ProductRecord
from forager.queue import door
from forager.queue.door import FETCHED_VIA, Ending, FetchAttempt, TaskQueue
from forager.queue.lifecycle import TaskStatus
from forager.store import packs
from forager.worker import parsing, presence
from forager.worker import writer as writer_module
from forager.worker.parsing import ParseJob, ParsePool
from forager.worker.pool import WorkerPool
from forager.worker.writer import Finish, GroupWriter
from tests.conftest import SettingsFactory
from tests.support.crawling import crawl, submit, tasks_by_id
from tests.support.pages import product_page
from tests.support.site import TestSite
from tests.support.waiting import entity_events, eventually, task_attempts

S = TaskStatus


class HangingParser:
    """A parser stuck in pure Python (like a catastrophic regex): it never returns."""

    name = "hang"
    version = "1"

    def parse(self, html: str, url: str) -> ProductRecord:
        while True:
            pass


# Registered on import: here, and in each parse process (``parser_modules``).
registry.register(HangingParser())


def _record(n: int) -> ProductRecord:
    return ProductRecord(
        url=f"https://shop.test/p/{n}",
        product_name=f"Product {n}",
        price=Decimal("9.99"),
        currency="USD",
        parser_name="generic",
        parser_version="2",
    )


def _finish(task: Any, worker: str, n: int) -> Finish:
    attempt = FetchAttempt(
        started_at=utcnow(), finished_at=utcnow(), status_code=200, page_path=f"k/{n}"
    )
    ending = Ending(
        task,
        worker,
        [S.CRAWLING],
        via=FETCHED_VIA,
        fetched=(f"k/{n}", 200, 5, None),
        fetch_attempt=attempt,
    )
    return Finish(ending, record=_record(n), answered_ms=5)


async def test_tasks_taken_away_while_in_the_writers_group_are_discarded(
    db: Database, make_settings: SettingsFactory
) -> None:
    # A group is written once it holds four tasks (or after 5 s): the pause and the steal below
    # land while three wait in it, whatever the machine's load, and the fourth sets it off.
    settings = make_settings(writer_interval_seconds=5.0, writer_batch_size=4)
    ids = await submit(db, settings, *[f"https://shop.test/p/{n}" for n in range(4)])
    [kept, paused, stolen, last] = sorted(
        await TaskQueue(db, settings).claim("w", 4, start=True), key=lambda t: t.id
    )
    writer = GroupWriter(db, settings, None)
    try:
        finishes = [_finish(t, "w", n) for n, t in enumerate((kept, paused, stolen))]
        results = asyncio.gather(*(writer.finish(f) for f in finishes))
        await asyncio.sleep(0)  # queued in the writer's group, not yet written
        await door.pause(db, paused.id)
        async with db.session() as session:  # the lease expired and another worker took it
            await session.execute(
                update(CrawlTask).where(CrawlTask.id == stolen.id).values(lease_owner="w2")
            )
        assert not results.done()
        assert await writer.finish(_finish(last, "w", 3)) == S.COMPLETED
        assert await results == [S.COMPLETED, None, None]
    finally:
        await writer.aclose()
    tasks = await tasks_by_id(db, ids)
    assert (tasks[kept.id].status, tasks[kept.id].html_path) == ("completed", "k/0")
    assert tasks[paused.id].status == "paused"
    assert (tasks[stolen.id].status, tasks[stolen.id].lease_owner) == ("crawling", "w2")
    for task, outcome in ((kept, "success"), (paused, "discarded"), (stolen, "discarded")):
        assert [a.outcome for a in await task_attempts(db, task.id)] == [outcome]
    assert "completed" not in await entity_events(db, "task", paused.id)
    assert await entity_events(db, "task", kept.id) == [
        "created",
        "queued",
        "crawling",
        "downloaded",
        "queued_parse",
        "parsing",
        "completed",
    ]
    async with db.reader() as session:
        products = sorted(await session.scalars(select(Product.crawl_task_id)))
    assert products == [kept.id, last.id]


async def test_a_group_is_written_at_once_when_its_pool_has_nothing_more_to_send(
    db: Database, make_settings: SettingsFactory
) -> None:
    """A group waits the writer's interval for more tasks, unless the task handed in says none
    of its pool is left to come (``Finish.last``): then it is written at once, with what
    waits before it."""
    # A minute's interval (over what settings allow, so copied in, not validated).
    settings = make_settings(writer_batch_size=8).model_copy(
        update={"writer_interval_seconds": 60.0}
    )
    await submit(db, settings, *[f"https://shop.test/p/{n}" for n in range(2)])
    first, second = sorted(
        await TaskQueue(db, settings).claim("w", 2, start=True), key=lambda t: t.id
    )
    writer = GroupWriter(db, settings, None)
    try:
        waiting = asyncio.ensure_future(writer.finish(_finish(first, "w", 0)))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the interval: a minute
        last = _finish(second, "w", 1)
        last.last = True
        # Well within the interval, or the group waited for it.
        assert await asyncio.wait_for(writer.finish(last), 30) == S.COMPLETED
        assert await waiting == S.COMPLETED
    finally:
        await writer.aclose()


async def test_a_pools_last_task_out_is_written_without_waiting_for_more(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    """Every task of the pool is waiting in the writer: nothing more can join the group, so
    it is written then, not after the writer's interval (a minute here)."""
    settings = make_settings(writer_batch_size=8).model_copy(
        update={"writer_interval_seconds": 60.0}
    )
    ids = await submit(db, settings, site.url("/product/1"), site.url("/product/2"))
    pool = WorkerPool(db, settings, concurrency=4, run_scheduler=False)
    runner = asyncio.create_task(pool.run())
    try:

        async def both_completed() -> bool:
            tasks = await tasks_by_id(db, ids)
            return all(t.status == S.COMPLETED for t in tasks.values())

        await eventually(both_completed, "both tasks written", timeout=30)
    finally:
        pool.stop()
        await runner


async def test_a_warmed_parse_pool_starts_its_first_process_before_any_page(
    tmp_path: Any,
) -> None:
    pool = ParsePool(load_settings(data_dir=tmp_path), size=2)
    try:
        pool.warm()
        pool.warm()  # once
        await eventually(lambda: len(pool._children) == 1, "the first parse process ready")
        [child] = pool._children
        page = product_page(1, Decimal("9.99"), True, "http://shop.test")
        job = ParseJob(url="http://shop.test/p/1", parser_name="generic", body=page.encode())
        assert (await pool.parse(job)).record is not None
        assert pool._children[0] is child  # the page went to the process already started
    finally:
        await pool.aclose()
    assert not child.alive


# SQLite's writers serialize on BEGIN IMMEDIATE: no claim runs beside a group.
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_a_domain_stays_claimable_while_the_writer_writes_a_group(
    db: Database, make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer touches the domain's row (breaker tally) last: a claim skips a locked domain
    (``SKIP LOCKED``), so holding that lock through the whole group starved every other
    worker process of the domain's tasks until the group committed."""
    settings = make_settings(writer_interval_seconds=0)
    await submit(db, settings, *[f"https://shop.test/p/{n}" for n in range(2)])
    [first] = await TaskQueue(db, settings).claim("w", 1, start=True)
    in_group, go_on = asyncio.Event(), asyncio.Event()
    real_save = writer_module.save_products

    async def save_after_a_pause(*args: Any) -> Any:  # mid-group: tasks settled, not committed
        in_group.set()
        await go_on.wait()
        return await real_save(*args)

    monkeypatch.setattr(writer_module, "save_products", save_after_a_pause)
    writer = GroupWriter(db, settings, None)
    try:
        written = asyncio.create_task(writer.finish(_finish(first, "w", 0)))
        await asyncio.wait_for(in_group.wait(), 10)
        claimed = await asyncio.wait_for(TaskQueue(db, settings).claim("w2", 1, start=True), 10)
        go_on.set()
        assert await written == S.COMPLETED
    finally:
        go_on.set()
        await writer.aclose()
    assert [t.url for t in claimed] == ["https://shop.test/p/1"]


async def test_the_next_request_goes_out_while_the_page_before_it_is_written(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    # One request at a time, for the worker and for the domain; a group is written after 5 s
    # (or once it holds 8 tasks), so the first page waits in the writer through the test.
    settings = make_settings(
        writer_interval_seconds=5.0, writer_batch_size=8, default_max_concurrent_requests=1
    )
    urls = [site.url("/hold/first"), site.url("/product/2"), site.url("/product/3")]
    [first, second, third] = await submit(db, settings, *urls)
    pool = WorkerPool(db, settings, concurrency=1, run_scheduler=False)
    # Nor is a group written early for being the pool's last task out: the first page may be
    # handed in before the second is claimed.
    pool.pipeline.last_out = lambda: False
    runner = asyncio.create_task(pool.run())
    try:
        await eventually(lambda: site.held("first") == 1, "the first request in flight")
        await asyncio.sleep(0.2)  # time enough for a second request, were it allowed
        assert _asked(site, "/product/2") == 0  # one request at once: the domain's limit holds
        site.release("first")
        await eventually(lambda: _asked(site, "/product/2") == 1, "the second request")
        # It went out while the first page waited in the writer, not after it was written.
        assert (await tasks_by_id(db, [first]))[first].status == S.CRAWLING
        await asyncio.sleep(0.2)
        assert _asked(site, "/product/3") == 0  # two tasks in flight at most: the concurrency again
    finally:
        pool.stop()
        await runner
    tasks = await tasks_by_id(db, [first, second, third])
    statuses = [tasks[i].status for i in (first, second, third)]
    assert statuses == ["completed", "completed", "pending"]


async def test_beside_another_worker_a_task_holds_its_slot_until_written(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    """Another live worker process claims from the same queue: the domain's slot is not freed
    early for this one alone, or it would take every slot it frees (first come, first served,
    as the other sees them)."""
    settings = make_settings(
        writer_interval_seconds=1.0, writer_batch_size=8, default_max_concurrent_requests=1
    )
    await presence.report(db, "elsewhere:1:worker:x", kind="worker", concurrency=4, in_flight=0,
                          processed=0)  # fmt: skip
    [first, second] = await submit(db, settings, site.url("/product/1"), site.url("/product/2"))
    pool = WorkerPool(db, settings, concurrency=1, run_scheduler=False)
    runner = asyncio.create_task(pool.run())
    try:
        await eventually(lambda: _asked(site, "/product/1") == 1, "the first request")
        await eventually(lambda: _asked(site, "/product/2") == 1, "the second request")
        # The second went out only once the first was written.
        requested = next(r.start for r in site.requests() if r.path == "/product/2")
        async with db.reader() as session:
            completed = await session.scalar(
                select(Event.created_at).where(
                    Event.entity_id == str(first), Event.event == "completed"
                )
            )
        assert completed is not None, "the second request went out before the first was written"
        assert completed.timestamp() <= requested
    finally:
        pool.stop()
        await runner
    assert {t.status for t in (await tasks_by_id(db, [first, second])).values()} == {"completed"}


def _asked(site: TestSite, path: str) -> int:
    return sum(1 for r in site.requests() if r.path == path)


async def test_a_failed_group_is_written_again_exactly_once(
    db: Database, settings: Settings, site: TestSite
) -> None:
    cut = {"left": 2}

    def cut_connection(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        # The first two group commits lose their connection at the attempts insert.
        if statement.lstrip().upper().startswith("INSERT INTO CRAWL_ATTEMPTS") and cut["left"]:
            cut["left"] -= 1
            raise ConnectionResetError("connection cut by the test")

    ids = await submit(db, settings, *[site.url(f"/product/{n}?kb=2") for n in range(12)])
    event.listen(db.engine.sync_engine, "before_cursor_execute", cut_connection)
    try:
        tasks = await crawl(db, settings, ids, concurrency=6)
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", cut_connection)
    assert cut["left"] == 0
    assert {t.status for t in tasks.values()} == {"completed"}
    async with db.reader() as session:
        completions = Counter(
            await session.scalars(select(Event.entity_id).where(Event.event == "completed"))
        )
        attempts = Counter(await session.scalars(select(CrawlAttempt.task_id)))
        products = await session.scalar(select(func.count()).select_from(Product))
    assert completions == Counter({str(i): 1 for i in ids})
    assert attempts == Counter(dict.fromkeys(ids, 1))
    assert products == len(ids)


@pytest.fixture
async def serving(make_settings: SettingsFactory) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with its built-in workers and a parse budget of three seconds (a page that
    parses in milliseconds keeps within it however loaded the machine is)."""
    settings = make_settings(
        serve_workers=2,
        parse_timeout_seconds=3.0,
        parse_processes=1,
        parser_modules=["tests.test_task_path"],
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://forager.test") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


async def test_a_parse_over_budget_fails_and_the_api_keeps_answering(
    serving: httpx.AsyncClient, site: TestSite
) -> None:
    runtime = serving.app.state.runtime  # type: ignore[attr-defined]
    db, settings = runtime.db, runtime.settings
    [stuck] = await submit(db, settings, site.url("/product/1"), parser_name="hang")

    async def being_parsed() -> bool:
        task = (await tasks_by_id(db, [stuck]))[stuck]
        return task.status == "crawling" and any(r.path == "/product/1" for r in site.requests())

    await eventually(being_parsed, "the page to be fetched and handed to the hanging parser")
    health = await serving.get("/health")  # answered while the parse process spins
    assert health.status_code == 200
    assert health.json()["status"] in ("healthy", "degraded")

    async def ended(task_id: int) -> CrawlTask | None:
        task = (await tasks_by_id(db, [task_id]))[task_id]
        return task if task.status in ("failed", "completed") else None

    task = await eventually(lambda: ended(stuck), "the stuck parse to fail")
    assert (task.status, task.error_type) == ("failed", "parse")
    assert "longer than the budget of 3 s" in (task.error_message or "")
    assert task.html_path is not None  # the page is kept for a later restart-parsing
    # The stuck process was replaced: the app's workers parse the next page in a fresh one.
    [fine] = await submit(db, settings, site.url("/product/2"))
    done = await eventually(lambda: ended(fine), "the next page")
    assert done.status == "completed", done.error_message


async def test_an_unchanged_recrawl_moves_last_crawled_at_only(
    db: Database, settings: Settings, site: TestSite
) -> None:
    [task_id] = await submit(db, settings, site.url("/product/8"), is_recurring=True)
    await crawl(db, settings, [task_id])
    async with db.reader() as session:
        first = await session.scalar(select(Product))
    assert first is not None
    async with db.session() as session:
        await session.execute(
            update(CrawlTask)
            .where(CrawlTask.id == task_id)
            .values(next_crawl_at=utcnow() - timedelta(seconds=1))
        )
    assert await TaskQueue(db, settings).requeue_due_recrawls() == 1
    await crawl(db, settings, [task_id])
    async with db.reader() as session:
        again = await session.scalar(select(Product))
    assert again is not None
    assert again.last_crawled_at > first.last_crawled_at
    assert (again.updated_at, again.content_hash) == (first.updated_at, first.content_hash)


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux's scheduling classes")
async def test_parse_processes_run_as_batch_work(tmp_path: Any) -> None:
    pool = ParsePool(load_settings(data_dir=tmp_path), size=1)
    page = product_page(1, Decimal("9.99"), True, "http://shop.test")
    try:
        job = ParseJob(url="http://shop.test/p/1", parser_name="generic", body=page.encode())
        parsed = await pool.parse(job)
        assert parsed.record is not None and parsed.record.price == Decimal("9.99")
        [child] = pool._children
        assert os.sched_getscheduler(child.process.pid) == os.SCHED_BATCH
        assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the event loop's process is not
        # FORAGER_PARSE_NICE (10): the event loop gets a core first on a busy machine.
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, child.process.pid) == min(ours + 10, 19)
    finally:
        await pool.aclose()


async def test_parse_processes_store_pages_at_the_configured_gzip_level(tmp_path: Any) -> None:
    page = product_page(2, Decimal("4.50"), True, "http://shop.test", kb=40)
    sizes = {}
    for level in (1, 9):
        settings = load_settings(data_dir=tmp_path / str(level), page_compression_level=level)
        pool = ParsePool(settings, size=1)
        try:
            job = ParseJob(
                url="http://shop.test/p/2",
                parser_name="generic",
                body=page.encode(),
                store=settings.pages_dir,
            )
            parsed = await pool.parse(job)
        finally:
            await pool.aclose()
        assert parsed.record is not None and parsed.page_key is not None
        stored = packs.read(settings.pages_dir, parsed.page_key)
        assert gzip.decompress(stored) == page.encode()
        assert len(stored) == len(gzip.compress(page.encode(), compresslevel=level, mtime=0))
        sizes[level] = len(stored)
    assert sizes[9] < sizes[1]


def _job(settings: Settings, n: int, parser_name: str = "generic") -> ParseJob:
    page = product_page(n, Decimal(f"{n}.25"), True, "http://shop.test")
    return ParseJob(
        url=f"http://shop.test/p/{n}",
        parser_name=parser_name,
        body=page.encode(),
        store=settings.pages_dir,
    )


async def test_a_page_queued_behind_a_stuck_one_is_parsed_by_its_replacement(
    tmp_path: Any,
) -> None:
    """Two pages wait in one process's pipe; the first hangs: it fails on its own budget and
    keeps its page, the second was never started there and is parsed by the new process."""
    settings = load_settings(
        data_dir=tmp_path, parse_timeout_seconds=3.0, parser_modules=["tests.test_task_path"]
    )
    pool = ParsePool(settings, size=1)
    try:
        await pool.parse(_job(settings, 1))  # the process is up
        [first_child] = pool._children
        stuck = asyncio.create_task(pool.parse(_job(settings, 2, "hang")))
        behind = asyncio.create_task(pool.parse(_job(settings, 3)))
        await asyncio.sleep(0)  # both first steps ran: both pages are in one process's pipe
        assert len(first_child.queued) == 2
        hung, parsed = await asyncio.gather(stuck, behind)
        assert hung.error is not None and hung.error[0] == "parse"
        assert hung.page_key is not None  # stored before its parse began
        assert b"Product 2" in gzip.decompress(packs.read(settings.pages_dir, hung.page_key))
        assert parsed.error is None and parsed.record is not None
        assert parsed.record.price == Decimal("3.25")
        assert not first_child.alive and pool._children and pool._children[0] is not first_child
    finally:
        await pool.aclose()


async def test_a_second_parse_process_starts_only_when_the_first_stays_full(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages that come one or two at a time, or in a burst one process clears before
    ``GROW_AFTER_SECONDS`` (a browser worker's eight), keep one process and its memory; pages
    that keep every process full longer start the next, up to ``size``."""
    settings = load_settings(data_dir=tmp_path)
    pool = ParsePool(settings, size=2)
    monkeypatch.setattr(parsing, "GROW_AFTER_SECONDS", 60.0)  # any burst is cleared in time
    try:
        for n in (1, 2):
            assert (await pool.parse(_job(settings, n))).record is not None
        both = await asyncio.gather(*(pool.parse(_job(settings, n)) for n in (3, 4)))
        assert [p.record.price for p in both if p.record] == [Decimal("3.25"), Decimal("4.25")]
        burst = await asyncio.gather(*(pool.parse(_job(settings, n)) for n in range(5, 13)))
        assert all(p.record is not None for p in burst)
        assert len(pool._children) == 1
        monkeypatch.setattr(parsing, "GROW_AFTER_SECONDS", 0.001)  # none is cleared in time
        many = await asyncio.gather(*(pool.parse(_job(settings, n)) for n in range(13, 20)))
        assert all(p.record is not None for p in many)
        assert len(pool._children) == 2
    finally:
        await pool.aclose()


async def test_a_cancelled_parse_leaves_its_process_answering_the_next_page(
    tmp_path: Any,
) -> None:
    settings = load_settings(data_dir=tmp_path)
    pool = ParsePool(settings, size=1)
    try:
        await pool.parse(_job(settings, 1))
        [child] = pool._children
        gone = asyncio.create_task(pool.parse(_job(settings, 4)))
        await asyncio.sleep(0)  # its first step sent the page; no answer can be read yet
        assert len(child.queued) == 1
        gone.cancel()
        parsed = await pool.parse(_job(settings, 5))  # queued behind the abandoned one
        assert parsed.record is not None and parsed.record.price == Decimal("5.25")
        assert pool._children == [child] and child.alive
    finally:
        await pool.aclose()


async def test_pages_queued_in_a_process_that_dies_are_parsed_elsewhere(tmp_path: Any) -> None:
    settings = load_settings(
        data_dir=tmp_path, parse_timeout_seconds=30.0, parser_modules=["tests.test_task_path"]
    )
    pool = ParsePool(settings, size=1)
    try:
        await pool.parse(_job(settings, 1))
        [child] = pool._children
        stuck = asyncio.create_task(pool.parse(_job(settings, 6, "hang")))
        behind = asyncio.create_task(pool.parse(_job(settings, 7)))
        await asyncio.sleep(0)  # both first steps ran: both pages are in one process's pipe
        assert len(child.queued) == 2
        assert child.process.pid is not None
        os.kill(child.process.pid, 9)
        died, parsed = await asyncio.gather(stuck, behind)
        assert died.error is not None and died.error[0] == "internal"
        assert "parse process died" in died.error[1]
        assert parsed.record is not None and parsed.record.price == Decimal("7.25")
    finally:
        await pool.aclose()
