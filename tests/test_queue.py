"""The queue on both engines: submit, claim order, politeness, retries, leases, recrawls."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlTask, Domain
from forager.db.types import utcnow
from forager.politeness.gate import open_after
from forager.queue import scheduler
from forager.queue.door import ClaimedTask, Ending, SubmitSpec, TaskQueue, submit_urls
from tests.conftest import SettingsFactory
from tests.support.crawling import submit, tasks_by_id
from tests.support.waiting import entity_events, task_attempts


async def _set(db: Database, model: type, row_id: int, **values: object) -> None:
    async with db.session() as session:
        await session.execute(update(model).where(model.id == row_id).values(**values))  # type: ignore[attr-defined]


# -- submit ---------------------------------------------------------------------------


async def test_submit_dedups_and_creates_domains(db: Database, settings: Settings) -> None:
    outcomes = await submit_urls(
        db,
        settings,
        [
            SubmitSpec("https://www.amazon.com.br/dp/B0X?utm_source=mail"),
            SubmitSpec("https://WWW.AMAZON.COM.BR:443/dp/B0X#reviews"),
            SubmitSpec("https://shop.example/p/1"),
            SubmitSpec("mailto:someone@example.com"),
        ],
    )
    assert [o.result for o in outcomes] == ["created", "duplicate", "created", "invalid"]
    assert outcomes[0].task_id == outcomes[1].task_id
    assert "not crawlable" in (outcomes[3].error or "")
    again = await submit_urls(db, settings, [SubmitSpec("https://www.amazon.com.br/dp/B0X")])
    assert again[0].result == "duplicate"
    assert again[0].task_id == outcomes[0].task_id
    async with db.reader() as session:
        domains = {d.domain_name: d for d in await session.scalars(select(Domain))}
        assert await session.scalar(select(CrawlTask.id).where(CrawlTask.url.like("%B0X%"))) == (
            outcomes[0].task_id
        )
    assert domains["www.amazon.com.br"].parser_name == "amazon"
    assert domains["shop.example"].parser_name == "generic"
    assert domains["shop.example"].base_url == "https://shop.example"
    assert await entity_events(db, "task", outcomes[0].task_id or 0) == ["created"]


async def test_submit_refuses_bad_options_per_url(db: Database, settings: Settings) -> None:
    outcomes = await submit_urls(
        db,
        settings,
        [SubmitSpec("https://e.com/a", priority=0), SubmitSpec("https://e.com/b", parser_name="x")],
    )
    assert [o.result for o in outcomes] == ["invalid", "invalid"]
    assert "priority" in (outcomes[0].error or "")
    assert "unknown parser 'x'" in (outcomes[1].error or "")
    async with db.reader() as session:
        assert list(await session.scalars(select(CrawlTask))) == []


# -- claim ------------------------------------------------------------------------------


async def test_claim_orders_by_priority_then_schedule(db: Database, settings: Settings) -> None:
    now = utcnow()
    low = await submit(db, settings, "https://a.test/low", priority=9)
    high_late = await submit(
        db,
        settings,
        "https://b.test/high-late",
        priority=1,
        scheduled_at=now - timedelta(seconds=1),
    )
    high_early = await submit(
        db, settings, "https://c.test/high-early", priority=1, scheduled_at=now - timedelta(hours=1)
    )
    future = await submit(
        db, settings, "https://d.test/future", priority=1, scheduled_at=now + timedelta(hours=1)
    )
    queue = TaskQueue(db, settings)
    claimed = await queue.claim("w1", limit=10)
    assert [t.id for t in claimed] == high_early + high_late + low
    assert future[0] not in [t.id for t in claimed]
    tasks = await tasks_by_id(db, [t.id for t in claimed])
    assert {t.status for t in tasks.values()} == {"queued"}
    assert {t.lease_owner for t in tasks.values()} == {"w1"}
    assert all(t.lease_expires_at and t.lease_expires_at > utcnow() for t in tasks.values())


async def test_inactive_domains_and_admin_states_are_never_claimed(
    db: Database, settings: Settings
) -> None:
    [off] = await submit(db, settings, "https://off.test/1")
    [paused] = await submit(db, settings, "https://on.test/paused")
    [cancelled] = await submit(db, settings, "https://on.test/cancelled")
    [ok] = await submit(db, settings, "https://on.test/ok")
    async with db.session() as session:
        await session.execute(
            update(Domain).where(Domain.domain_name == "off.test").values(is_active=False)
        )
    await _set(db, CrawlTask, paused, status="paused")
    await _set(db, CrawlTask, cancelled, status="cancelled")
    claimed = await TaskQueue(db, settings).claim("w", limit=10)
    assert [t.id for t in claimed] == [ok]
    assert off not in [t.id for t in claimed]


async def test_max_concurrent_requests_holds_across_claimers(
    db: Database, make_settings: SettingsFactory
) -> None:
    settings = make_settings(default_max_concurrent_requests=2)
    await submit(db, settings, *[f"https://busy.test/{n}" for n in range(5)])
    await submit(db, settings, "https://other.test/1")
    queue = TaskQueue(db, settings)
    first = await queue.claim("w1", limit=10)
    second = await queue.claim("w2", limit=10)
    busy = [t for t in first + second if t.domain_name == "busy.test"]
    assert len(busy) == 2  # two workers together never exceed the domain's limit
    assert [t.domain_name for t in first + second].count("other.test") == 1
    # A finished fetch frees a slot.
    async with db.session() as session:
        await session.execute(
            update(CrawlTask).where(CrawlTask.id == busy[0].id).values(status="downloaded")
        )
    third = await queue.claim("w3", limit=10)
    assert [t.domain_name for t in third] == ["busy.test"]


async def test_crawl_delay_gates_the_domain_for_everyone(
    db: Database, make_settings: SettingsFactory
) -> None:
    settings = make_settings(default_crawl_delay_seconds=30, lease_seconds=60)
    await submit(db, settings, "https://slow.test/1", "https://slow.test/2")
    queue = TaskQueue(db, settings)
    [first] = await queue.claim("w1", limit=10)  # one request per gate opening
    assert await queue.claim("w2", limit=10) == []
    # Until its request is sent the domain stays closed (at most for the lease) ...
    closed = await queue.next_gate_opening()
    assert closed is not None
    assert timedelta(seconds=55) < closed - utcnow() <= timedelta(seconds=60)
    # ... then it opens crawl_delay_seconds after the send.
    async with db.session() as session:
        await open_after(session, first.domain_id, first.crawl_delay_seconds)
    gate = await queue.next_gate_opening()
    assert gate is not None
    assert timedelta(seconds=25) < gate - utcnow() <= timedelta(seconds=30)
    assert await queue.claim("w2", limit=10) == []
    async with db.session() as session:
        await session.execute(update(Domain).values(next_fetch_at=utcnow() - timedelta(seconds=1)))
    assert len(await queue.claim("w2", limit=10)) == 1


# -- retries, leases --------------------------------------------------------------------


async def _claim_one(queue: TaskQueue, worker: str = "w") -> ClaimedTask:
    [task] = await queue.claim(worker)
    return task


async def test_retryable_failures_back_off_then_fail(
    db: Database, make_settings: SettingsFactory
) -> None:
    settings = make_settings(max_retries=2, retry_base_seconds=100, retry_max_seconds=1000)
    [task_id] = await submit(db, settings, "https://flaky.test/1")
    queue = TaskQueue(db, settings)
    for attempt in (1, 2, 3):
        task = await _claim_one(queue)
        async with db.session() as session:
            status = await queue.fail(session, task, "w", error_type="http_5xx", message="HTTP 503")
        row = (await tasks_by_id(db, [task_id]))[task_id]
        if attempt <= 2:
            assert status == "pending"
            assert row.retry_count == attempt
            delay = (row.scheduled_at - utcnow()).total_seconds()
            base = 100 * 2 ** (attempt - 1)
            assert 0.5 * base - 1 <= delay <= 1.5 * base  # exponential, with jitter
            assert row.lease_owner is None
            await _set(db, CrawlTask, task_id, scheduled_at=utcnow())
        else:
            assert status == "failed"
            assert row.status == "failed"
            assert row.error_type == "http_5xx"
            assert row.error_message == "HTTP 503"
            assert row.completed_at is not None
    assert (await entity_events(db, "task", task_id)).count("retry_scheduled") == 2


@pytest.mark.parametrize("error_type", ["http_4xx", "too_large", "parse", "robots_denied"])
async def test_permanent_errors_fail_at_once(
    db: Database, settings: Settings, error_type: str
) -> None:
    [task_id] = await submit(db, settings, "https://gone.test/1")
    queue = TaskQueue(db, settings)
    task = await _claim_one(queue)
    async with db.session() as session:
        assert await queue.fail(session, task, "w", error_type=error_type, message="x") == "failed"
    assert (await tasks_by_id(db, [task_id]))[task_id].retry_count == 0


async def test_expired_lease_requeues_once_and_locks_out_the_old_worker(
    db: Database, settings: Settings
) -> None:
    [task_id] = await submit(db, settings, "https://dead.test/1")
    queue = TaskQueue(db, settings)
    task = await _claim_one(queue, "dead-worker")
    async with db.session() as session:
        assert await queue.start_crawl(session, task, "dead-worker")
    await _set(db, CrawlTask, task_id, lease_expires_at=utcnow() - timedelta(seconds=1))
    assert await queue.reap_expired_leases() == 1
    assert await queue.reap_expired_leases() == 0  # a second sweep consumes nothing more
    row = (await tasks_by_id(db, [task_id]))[task_id]
    assert (row.status, row.retry_count, row.lease_owner) == ("pending", 1, None)
    # The worker that lost the lease cannot move or fail the task any more.
    async with db.session() as session:
        assert (
            await queue.fail(session, task, "dead-worker", error_type="network", message="x")
            is None
        )
    assert (await tasks_by_id(db, [task_id]))[task_id].retry_count == 1
    assert "lease_expired" in await entity_events(db, "task", task_id)


async def test_expired_parse_lease_goes_back_to_downloaded(
    db: Database, settings: Settings
) -> None:
    [task_id] = await submit(db, settings, "https://p.test/1")
    await _set(
        db,
        CrawlTask,
        task_id,
        status="parsing",
        html_path="x",
        lease_owner="w",
        lease_expires_at=utcnow() - timedelta(seconds=1),
    )
    assert await TaskQueue(db, settings).reap_expired_leases() == 1
    assert (await tasks_by_id(db, [task_id]))[task_id].status == "downloaded"
    [parse] = await TaskQueue(db, settings).claim_parse("w2")
    assert (parse.id, parse.status) == (task_id, "queued_parse")


async def test_an_expired_fetch_lease_leaves_the_lost_try_in_the_history(
    db: Database, settings: Settings
) -> None:
    [task_id] = await submit(db, settings, "https://dead.test/3")
    queue = TaskQueue(db, settings)
    task = await _claim_one(queue, "dead-worker")
    async with db.session() as session:
        assert await queue.start_crawl(session, task, "dead-worker")
    started = (await tasks_by_id(db, [task_id]))[task_id].started_at
    assert started is not None
    await _set(db, CrawlTask, task_id, lease_expires_at=utcnow() - timedelta(seconds=1))
    assert await queue.reap_expired_leases() == 1
    assert await queue.reap_expired_leases() == 0
    [lost] = await task_attempts(db, task_id)
    assert (lost.phase, lost.outcome, lost.error_type) == ("fetch", "retry", "lease_expired")
    assert (lost.worker_id, lost.started_at) == ("dead-worker", started)
    assert lost.finished_at is not None and lost.finished_at >= started
    assert "may or may not have reached the site" in (lost.error_message or "")
    assert lost.status_code is None and lost.page_path is None


async def test_an_expired_parse_lease_is_a_lost_parse_try(db: Database, settings: Settings) -> None:
    [task_id] = await submit(db, settings, "https://p.test/2", max_retries=0)
    await _set(
        db,
        CrawlTask,
        task_id,
        status="parsing",
        html_path="pages/p2",
        lease_owner="parser-w",
        lease_expires_at=utcnow() - timedelta(seconds=1),
    )
    assert await TaskQueue(db, settings).reap_expired_leases() == 1
    assert (await tasks_by_id(db, [task_id]))[task_id].status == "failed"  # no retry left
    [lost] = await task_attempts(db, task_id)
    assert (lost.phase, lost.outcome, lost.error_type) == ("parse", "failed", "lease_expired")
    assert (lost.worker_id, lost.page_path) == ("parser-w", "pages/p2")


async def test_two_reapers_racing_record_one_lost_try(db: Database, settings: Settings) -> None:
    """A second process's reaper runs while the first one's sweep is not committed yet: it
    must not move the task again, nor write a second attempt for the one lost try."""
    [task_id] = await submit(db, settings, "https://dead.test/4")
    await _claim_one(TaskQueue(db, settings), "dead-worker")
    await _set(db, CrawlTask, task_id, lease_expires_at=utcnow() - timedelta(seconds=1))
    other = Database(settings.resolved_database_url)  # another process's engine
    try:
        async with other.reader() as session:  # connected before the race starts
            await session.execute(select(1))
        async with db.session() as first:
            assert await scheduler.reap_expired_leases(first, utcnow()) == 1
            # SQLite: the second waits for the first's write lock; PostgreSQL: it skips the
            # row the first holds. Either way it finds nothing once the first commits.
            second = asyncio.create_task(TaskQueue(other, settings).reap_expired_leases())
            await asyncio.sleep(0.2)  # give the second sweep time to run into the first
        assert await second == 0
    finally:
        await other.dispose()
    assert [a.error_type for a in await task_attempts(db, task_id)] == ["lease_expired"]
    assert (await tasks_by_id(db, [task_id]))[task_id].retry_count == 1


async def test_exhausted_expired_lease_fails(db: Database, settings: Settings) -> None:
    [task_id] = await submit(db, settings, "https://dead.test/2", max_retries=0)
    await _claim_one(TaskQueue(db, settings))
    await _set(db, CrawlTask, task_id, lease_expires_at=utcnow() - timedelta(seconds=1))
    await TaskQueue(db, settings).reap_expired_leases()
    row = (await tasks_by_id(db, [task_id]))[task_id]
    assert (row.status, row.error_type) == ("failed", "internal")
    assert "lease expired" in (row.error_message or "")


async def test_heartbeat_extends_only_own_leases(db: Database, settings: Settings) -> None:
    ids = await submit(db, settings, "https://h.test/1", "https://i.test/1")
    queue = TaskQueue(db, settings)
    mine = await _claim_one(queue, "me")
    theirs = await _claim_one(queue, "them")
    past = utcnow() - timedelta(seconds=5)
    async with db.session() as session:
        await session.execute(update(CrawlTask).values(lease_expires_at=past))
    assert await queue.heartbeat("me") == 1
    rows = await tasks_by_id(db, ids)
    assert rows[mine.id].lease_expires_at and rows[mine.id].lease_expires_at > utcnow()
    assert rows[theirs.id].lease_expires_at == past


async def test_release_returns_the_task_without_consuming_a_retry(
    db: Database, settings: Settings
) -> None:
    [task_id] = await submit(db, settings, "https://r.test/1")
    queue = TaskQueue(db, settings)
    task = await _claim_one(queue, "w")
    assert await queue.release(task.id, "w")
    assert not await queue.release(task.id, "w")
    row = (await tasks_by_id(db, [task_id]))[task_id]
    assert (row.status, row.retry_count, row.lease_owner) == ("pending", 0, None)


async def test_admin_change_wins_over_the_worker(db: Database, settings: Settings) -> None:
    [task_id] = await submit(db, settings, "https://race.test/1")
    queue = TaskQueue(db, settings)
    task = await _claim_one(queue)
    await _set(db, CrawlTask, task_id, status="paused")
    async with db.session() as session:
        assert not await queue.start_crawl(session, task, "w")
    assert (await tasks_by_id(db, [task_id]))[task_id].status == "paused"


# -- recurring ----------------------------------------------------------------------------


async def test_recurring_tasks_come_back_when_due(db: Database, settings: Settings) -> None:
    [task_id] = await submit(
        db, settings, "https://rec.test/1", is_recurring=True, crawl_frequency_seconds=3600
    )
    [once] = await submit(db, settings, "https://rec.test/once")
    queue = TaskQueue(db, settings)
    for task in await queue.claim("w", limit=5):
        async with db.session() as session:
            await queue.start_crawl(session, task, "w")
        await _set(db, CrawlTask, task.id, status="parsing")
        async with db.session() as session:
            assert await queue.settle(session, [Ending(task, "w", ["parsing"])]) == {
                task.id: "completed"
            }
    rows = await tasks_by_id(db, [task_id, once])
    gap = rows[task_id].next_crawl_at - rows[task_id].completed_at  # type: ignore[operator]
    assert gap == timedelta(hours=1)
    assert rows[once].next_crawl_at is None
    assert await queue.requeue_due_recrawls() == 0  # not due yet
    await _set(db, CrawlTask, task_id, next_crawl_at=utcnow() - timedelta(seconds=1))
    assert await queue.requeue_due_recrawls() == 1
    row = (await tasks_by_id(db, [task_id]))[task_id]
    assert (row.status, row.recrawl_count) == ("pending", 1)
    assert (await tasks_by_id(db, [once]))[once].status == "completed"
    assert (await entity_events(db, "task", task_id))[-1] == "recrawl_due"


async def test_every_transition_writes_an_event(db: Database, settings: Settings) -> None:
    [task_id] = await submit(db, settings, "https://ev.test/1")
    queue = TaskQueue(db, settings)
    task = await _claim_one(queue)
    async with db.session() as session:
        await queue.start_crawl(session, task, "w")
        await queue.fail(session, task, "w", error_type="timeout", message="slow")
    assert await entity_events(db, "task", task_id) == [
        "created",
        "queued",
        "crawling",
        "retry_scheduled",
    ]
