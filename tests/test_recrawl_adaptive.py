"""Adaptive recrawl (issue 17, seed 001's event-based triggers) on both engines, through the
worker's real writer: a price or availability change shortens a recurring task's frequency, an
unchanged crawl lengthens it, within the task's bounds; a failed, blocked or partial crawl
changes nothing; the frequency and its reason are on the task; tasks that are not adaptive pay
no extra statement."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import event, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlTask
from forager.db.types import utcnow
from forager.errors import FetchError
from forager.parse.base import ProductRecord
from forager.queue import adaptive, door
from forager.queue.adaptive import Adaptive
from forager.queue.door import FETCHED_VIA, ClaimedTask, Ending, FetchAttempt, TaskQueue
from forager.queue.lifecycle import TaskStatus
from forager.worker.writer import Finish, GroupWriter
from tests.support.crawling import submit, tasks_by_id
from tests.support.waiting import entity_events

S = TaskStatus
HOUR, DAY = 3600, 86_400
URL = "https://adapt.test/p/1"


def _record(price: str | None, available: bool | None = True) -> ProductRecord:
    return ProductRecord(
        url=URL,
        product_name="Kettle",
        price=None if price is None else Decimal(price),
        currency="EUR",
        is_available=available,
        parser_name="generic",
        parser_version="2",
    )


def _finish(task: ClaimedTask, record: ProductRecord | None, error: FetchError | None) -> Finish:
    fetched = None if error else ("k/1", 200, 5, None)
    attempt = FetchAttempt(started_at=utcnow(), finished_at=utcnow(), status_code=200)
    ending = Ending(
        task,
        "w",
        [S.CRAWLING],
        via=() if error else FETCHED_VIA,
        fetched=fetched,
        fetch_attempt=attempt,
    )
    return Finish(ending, record=record, fetch_error=error, answered_ms=None)


async def _crawl(
    db: Database,
    settings: Settings,
    task_id: int,
    *,
    record: ProductRecord | None = None,
    error: FetchError | None = None,
) -> CrawlTask:
    """One crawl of the task through the writer (due again first); the task row after it."""
    queue = TaskQueue(db, settings)
    async with db.session() as session:
        await session.execute(
            update(CrawlTask)
            .where(CrawlTask.id == task_id, CrawlTask.status.in_([S.COMPLETED, S.FAILED]))
            .values(next_crawl_at=utcnow() - timedelta(seconds=1))
        )
    await queue.requeue_due_recrawls()
    [task] = await queue.claim("w", 1, start=True, domains=["adapt.test"])
    writer = GroupWriter(db, settings, None)
    try:
        await writer.finish(_finish(task, record, error))
    finally:
        await writer.aclose()
    return (await tasks_by_id(db, [task_id]))[task_id]


def _gap(row: CrawlTask) -> timedelta:
    assert row.next_crawl_at is not None and row.completed_at is not None
    return row.next_crawl_at - row.completed_at


def test_the_steps_and_their_reasons() -> None:
    state = Adaptive(current=DAY, low=6 * HOUR, high=7 * DAY, unchanged=2)
    faster = adaptive.step(state, adaptive.changed("price"))
    assert (faster.frequency, faster.unchanged, faster.reason) == (
        12 * HOUR,
        0,
        "price changed → 12 h",
    )
    slower = adaptive.step(state, adaptive.UNCHANGED)
    assert (slower.frequency, slower.unchanged, slower.reason) == (
        int(1.5 * DAY),
        3,
        "unchanged 3 times → 1.5 d",
    )
    floor = adaptive.step(Adaptive(7 * HOUR, 6 * HOUR, DAY, 0), adaptive.changed("availability"))
    assert (floor.frequency, floor.reason) == (6 * HOUR, "availability changed → 6 h")
    held = adaptive.step(state, adaptive.PARTIAL)
    assert (held.frequency, held.unchanged, held.moved) == (DAY, 2, False)
    assert held.reason == "partial record: kept 1 d"
    assert adaptive.default_bounds(DAY) == (6 * HOUR, 7 * DAY)
    assert adaptive.default_bounds(120) == (60, 840)


async def test_changes_shorten_and_quiet_crawls_lengthen_within_bounds(
    db: Database, settings: Settings
) -> None:
    [task_id] = await submit(
        db,
        settings,
        URL,
        is_recurring=True,
        crawl_frequency_seconds=DAY,
        adaptive_recrawl=True,
        max_crawl_frequency_seconds=2 * DAY,
    )
    [row] = (await tasks_by_id(db, [task_id])).values()
    assert (row.min_crawl_frequency_seconds, row.max_crawl_frequency_seconds) == (6 * HOUR, 2 * DAY)
    assert row.crawl_frequency_reason == "starting frequency 1 d"

    first = await _crawl(db, settings, task_id, record=_record("80.00"))
    assert (first.current_crawl_frequency_seconds, _gap(first)) == (DAY, timedelta(days=1))
    assert first.unchanged_crawls == 0
    assert first.crawl_frequency_reason == "first crawl: kept 1 d"

    dropped = await _crawl(db, settings, task_id, record=_record("70.00"))
    assert dropped.current_crawl_frequency_seconds == 12 * HOUR
    assert dropped.crawl_frequency_reason == "price changed → 12 h"
    assert timedelta(hours=12) <= _gap(dropped) < timedelta(hours=12, minutes=1)

    out = await _crawl(db, settings, task_id, record=_record("70.00", available=False))
    assert out.current_crawl_frequency_seconds == 6 * HOUR  # the minimum
    assert out.crawl_frequency_reason == "availability changed → 6 h"
    floor = await _crawl(db, settings, task_id, record=_record("60.00", available=True))
    assert floor.current_crawl_frequency_seconds == 6 * HOUR
    assert floor.crawl_frequency_reason == "price and availability changed → 6 h"

    frequencies = []
    for _ in range(6):
        quiet = await _crawl(db, settings, task_id, record=_record("60.00"))
        frequencies.append(quiet.current_crawl_frequency_seconds)
    assert frequencies == [9 * HOUR, int(13.5 * HOUR), 72_900, 109_350, 164_025, 2 * DAY]
    assert quiet.unchanged_crawls == 6
    assert quiet.crawl_frequency_reason == "unchanged 6 times → 2 d"
    events = await entity_events(db, "task", task_id)
    assert events.count("recrawl_adapted") == 8  # every move, not the crawls that kept it


async def test_failed_blocked_and_partial_crawls_change_nothing(
    db: Database, settings: Settings
) -> None:
    [task_id] = await submit(
        db, settings, URL, is_recurring=True, crawl_frequency_seconds=DAY, adaptive_recrawl=True
    )
    await _crawl(db, settings, task_id, record=_record("80.00"))
    before = await _crawl(db, settings, task_id, record=_record("70.00"))
    assert before.current_crawl_frequency_seconds == 12 * HOUR
    async with db.session() as session:  # a failure is final at once
        await session.execute(
            update(CrawlTask).where(CrawlTask.id == task_id).values(max_retries=0)
        )
    for error in (
        FetchError("blocked by the site", error_type="blocked", status_code=403),
        FetchError("not found", error_type="http_4xx", status_code=404),
    ):
        failed = await _crawl(db, settings, task_id, error=error)
        assert failed.status == S.FAILED
        # The current frequency and streak stand; the next crawl comes at that frequency.
        assert (failed.current_crawl_frequency_seconds, failed.unchanged_crawls) == (12 * HOUR, 0)
        assert failed.crawl_frequency_reason == "price changed → 12 h"
        assert _gap(failed) == timedelta(hours=12)
    partial = await _crawl(db, settings, task_id, record=_record(None))
    assert partial.current_crawl_frequency_seconds == 12 * HOUR
    assert partial.crawl_frequency_reason == "partial record: kept 12 h"
    again = await _crawl(db, settings, task_id, record=_record(None))  # still partial
    assert (again.current_crawl_frequency_seconds, again.unchanged_crawls) == (12 * HOUR, 0)
    assert again.crawl_frequency_reason == "partial record: kept 12 h"
    # The next good price is compared with the last good one (70.00), not the missing one.
    back = await _crawl(db, settings, task_id, record=_record("80.00"))
    assert back.crawl_frequency_reason == "price changed → 6 h"


async def test_tasks_that_are_not_adaptive_pay_no_extra_statement(
    db: Database, settings: Settings
) -> None:
    [task_id] = await submit(db, settings, URL, is_recurring=True, crawl_frequency_seconds=HOUR)
    await _crawl(db, settings, task_id, record=_record("80.00"))
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        row = await _crawl(db, settings, task_id, record=_record("70.00"))
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)
    assert _gap(row) == timedelta(hours=1) and row.current_crawl_frequency_seconds is None
    assert not [s for s in seen if "current_crawl_frequency_seconds=" in s.replace(" ", "")]
    assert not [s for s in seen if "FROM price_history" in s]


async def test_recrawl_settings_are_lenient_and_editable(db: Database, settings: Settings) -> None:
    from forager.queue.submit import SubmitSpec, submit_urls

    # Nothing the schema allows is refused: adaptive makes a task recurring, bounds matter only
    # for an adaptive task, a maximum below the minimum is raised to it.
    lenient = await submit_urls(
        db,
        settings,
        [
            SubmitSpec("https://lenient.test/a", adaptive_recrawl=True),
            SubmitSpec("https://lenient.test/b", min_crawl_frequency_seconds=HOUR),
            SubmitSpec(
                "https://lenient.test/c",
                is_recurring=True,
                adaptive_recrawl=True,
                min_crawl_frequency_seconds=DAY,
                max_crawl_frequency_seconds=HOUR,
            ),
        ],
    )
    assert [o.result for o in lenient] == ["created"] * 3
    rows = await tasks_by_id(db, [o.task_id for o in lenient if o.task_id is not None])
    a, b, c = (rows[o.task_id] for o in lenient if o.task_id is not None)
    assert (a.is_recurring, a.adaptive_recrawl) == (True, True)
    assert (b.is_recurring, b.adaptive_recrawl, b.min_crawl_frequency_seconds) == (
        False,
        False,
        None,
    )
    assert (c.min_crawl_frequency_seconds, c.max_crawl_frequency_seconds) == (DAY, DAY)
    [task_id] = await submit(db, settings, URL, is_recurring=True, crawl_frequency_seconds=DAY)
    await _crawl(db, settings, task_id, record=_record("80.00"))
    task = await door.set_recrawl(
        db,
        task_id,
        door.RecrawlChange(adaptive_recrawl=True, crawl_frequency_seconds=2 * DAY),
        by="ops",
    )
    assert (task.current_crawl_frequency_seconds, task.min_crawl_frequency_seconds) == (
        2 * DAY,
        12 * HOUR,
    )
    assert task.crawl_frequency_reason == "set by ops: starting frequency 2 d"
    assert _gap(task) == timedelta(days=2)  # the finished task's next crawl follows
    off = await door.set_recrawl(db, task_id, door.RecrawlChange(is_recurring=False))
    assert off.next_crawl_at is None and off.current_crawl_frequency_seconds is None
    assert (await entity_events(db, "task", task_id))[-1] == "recrawl_changed"
    on = await door.set_recrawl(db, task_id, door.RecrawlChange(adaptive_recrawl=True))
    assert (on.is_recurring, on.adaptive_recrawl) == (True, True)
