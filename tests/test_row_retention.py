"""Row retention on both databases: every growing table is pruned past its limits in small
batches, what a live task, a product's price changes, a monitor and the outbox need stays, a
dry run counts exactly what the real run deletes; ``forager prune`` prints per-table counts."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select, text, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import (
    AlertAttempt,
    AlertDelivery,
    AlertRule,
    CrawlAttempt,
    CrawlTask,
    Event,
    Feed,
    FeedRun,
    Monitor,
    MonitorSnapshot,
    PriceHistory,
    Product,
)
from forager.db.types import utcnow
from forager.retention.prune import prune
from forager.runtime import Runtime, open_database
from tests.conftest import SettingsFactory
from tests.support.cli import forager
from tests.support.crawling import run_pool_until, submit

OLD, NEW = 100.0, 0.01  # ages in days (every default limit is at most 90 days)
PRICES = [("10.00", True), ("10.00", True), ("12.00", True), ("12.00", False), ("12.00", False)]


async def _seed(db: Database, settings: Settings) -> dict[str, Any]:
    """A finished and a live task with old and new events and attempts, a product's price
    history, two monitors' snapshots, alert deliveries; returns the ids that must stay."""
    now = utcnow()

    def ago(days: float) -> Any:
        return now - timedelta(days=days)

    done, live = await submit(db, settings, "https://shop.example/p/1", "https://shop.example/p/2")
    async with db.reader() as session:  # the submit's own events: new, they stay
        submitted = set(await session.scalars(select(Event.id)))
    keep: dict[str, set[Any]] = {}
    async with db.session() as session:
        await session.execute(
            update(CrawlTask).where(CrawlTask.id == done).values(status="completed")
        )
        domain_id = (await session.get(CrawlTask, done)).domain_id  # type: ignore[union-attr]
        old_done = [
            Event(entity_type="task", entity_id=str(done), event="x", created_at=ago(OLD))
            for _ in range(25)
        ]
        kept_events = [
            Event(entity_type="task", entity_id=str(live), event="x", created_at=ago(OLD)),
            Event(entity_type="task", entity_id=str(done), event="x", created_at=ago(NEW)),
        ]
        session.add_all(old_done + kept_events)
        old_attempts = [
            CrawlAttempt(task_id=done, outcome="failed", started_at=ago(OLD)) for _ in range(12)
        ]
        kept_attempts = [
            CrawlAttempt(task_id=done, outcome="success", started_at=ago(OLD), page_path="k/1"),
            CrawlAttempt(task_id=live, outcome="retry", started_at=ago(OLD)),
            CrawlAttempt(task_id=done, outcome="success", started_at=ago(NEW)),
        ]
        session.add_all(old_attempts + kept_attempts)

        product = Product(
            domain_id=domain_id,
            url="https://shop.example/p/1",
            url_hash="h" * 64,
            product_name="P",
            parser_name="generic",
            parser_version="1",
            content_hash="c",
        )
        session.add(product)
        await session.flush()
        history = [
            PriceHistory(
                product_id=product.id,
                price=Decimal(price),
                currency="EUR",
                is_available=stock,
                recorded_at=ago(OLD - i),
            )
            for i, (price, stock) in enumerate(PRICES)
        ]
        session.add_all(history)

        monitors = [
            Monitor(
                url=f"https://shop.example/m/{n}",
                min_interval_seconds=1,
                max_interval_seconds=10,
                current_interval_seconds=1,
            )
            for n in range(2)
        ]
        session.add_all(monitors)
        await session.flush()
        busy, quiet = monitors
        # busy: 5 old snapshots and 6 new ones (keep_last 4: two new ones go too);
        # quiet: 3 old ones (its newest stays, however old).
        snaps = {
            (m.id, age, n): MonitorSnapshot(
                monitor_id=m.id, data={"n": n}, content_hash=str(n), observed_at=ago(age - n / 100)
            )
            for m, ages in ((busy, [OLD] * 5 + [NEW] * 6), (quiet, [OLD] * 3))
            for n, age in enumerate(ages)
        }
        session.add_all(snaps.values())

        rule = AlertRule(name="r", kind="webhook", target_enc="x", target_display="x")
        session.add(rule)
        await session.flush()

        def delivery(status: str, age: float) -> AlertDelivery:
            return AlertDelivery(
                rule_id=rule.id,
                event="price_drop",
                subject_type="product",
                subject_id="1",
                payload={},
                status=status,
                created_at=ago(age),
            )

        old_sent = delivery("delivered", OLD)
        kept_deliveries = [delivery("pending", OLD), delivery("delivered", NEW)]
        # Another subject's only (so newest) delivery: old, but it says the alert's state.
        lone = delivery("failed", OLD)
        lone.subject_id = "2"
        kept_deliveries.append(lone)
        session.add_all([old_sent, *kept_deliveries])
        await session.flush()
        session.add(AlertAttempt(delivery_id=old_sent.id, duration_ms=3, status_code=200))
        await session.flush()

        # Feed runs: an old succeeded run goes; an old failed one (it is done again) and each
        # feed's newest run (here old and succeeded, of a second feed) stay.
        feeds = [
            Feed(
                name=f"f{n}",
                kind="products",
                format="jsonl",
                destination="directory",
                interval_seconds=60,
            )
            for n in range(2)
        ]
        session.add_all(feeds)
        await session.flush()

        def run(feed: Feed, status: str, age: float) -> FeedRun:
            return FeedRun(
                feed_id=feed.id, status=status, from_seq=0, to_seq=1, started_at=ago(age)
            )

        old_run = run(feeds[0], "succeeded", OLD)
        kept_runs = [run(feeds[0], "failed", OLD), run(feeds[0], "succeeded", NEW)]
        kept_runs.append(run(feeds[1], "succeeded", OLD))
        session.add_all([old_run, *kept_runs])
        await session.flush()
        keep["feed_runs"] = {r.id for r in kept_runs}
        keep["events"] = {e.id for e in kept_events} | submitted
        keep["crawl_attempts"] = {a.id for a in kept_attempts}
        keep["price_history"] = {history[i].id for i in (0, 2, 3, 4)}
        newest_busy = [snaps[busy.id, NEW, n] for n in range(7, 11)]
        keep["monitor_snapshots"] = {s.id for s in newest_busy} | {snaps[quiet.id, OLD, 2].id}
        keep["alert_deliveries"] = {d.id for d in kept_deliveries}
        keep["live_task"] = {str(live)}
    return keep


TABLES = {
    "events": Event,
    "crawl_attempts": CrawlAttempt,
    "price_history": PriceHistory,
    "monitor_snapshots": MonitorSnapshot,
    "alert_deliveries": AlertDelivery,
    "feed_runs": FeedRun,
}


async def _ids(db: Database) -> dict[str, set[Any]]:
    async with db.reader() as session:
        found = {name: set(await session.scalars(select(m.id))) for name, m in TABLES.items()}
        found["alert_attempts"] = set(await session.scalars(select(AlertAttempt.id)))
        return found


async def test_prune_keeps_what_is_needed_in_small_batches(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(retention_batch_rows=10, monitor_snapshot_keep_last=4)
    db = await open_database(settings)
    try:
        keep = await _seed(db, settings)
        before = await _ids(db)
        counted = await prune(db, settings, dry_run=True)
        assert await _ids(db) == before  # a dry run deletes nothing
        pruned = await prune(db, settings)
        assert (
            pruned.rows
            == counted.rows
            == {
                "events": 25,
                "crawl_attempts": 12,
                "price_history": 1,  # the repeat of 10.00 in stock; the newest repeat stays
                "monitor_snapshots": 5 + 2 + 2,
                "alert_deliveries": 1,
                "feed_runs": 1,
            }
        )
        after = await _ids(db)
        for name in TABLES:
            assert after[name] == keep[name], name
        assert after["alert_attempts"] == set()  # went with their delivery
        again = await prune(db, settings)
        assert again.total == 0
    finally:
        await db.dispose()


async def test_count_limits_and_off_switches(make_settings: SettingsFactory) -> None:
    settings = make_settings(
        event_retention_days=0,
        event_retention_max_rows=5,
        attempt_retention_days=0,
        price_history_retention_days=0,
        monitor_snapshot_retention_days=0,
        monitor_snapshot_keep_last=0,
        alert_delivery_retention_days=0,
        feed_run_retention_days=0,
    )
    db = await open_database(settings)
    try:
        keep = await _seed(db, settings)
        (live,) = keep["live_task"]
        async with db.reader() as session:
            newest = list(await session.scalars(select(Event.id).order_by(Event.id.desc())))
            of_live = set(await session.scalars(select(Event.id).where(Event.entity_id == live)))
        pruned = await prune(db, settings)
        assert list(pruned.rows) == ["events"]  # the other tables' limits are off
        async with db.reader() as session:
            left = set(await session.scalars(select(Event.id)))
        # The newest five stay, and the live task's events however far back.
        assert left == set(newest[:5]) | of_live
        assert len(newest) > len(left) > 5
    finally:
        await db.dispose()


def test_cli_prune_prints_each_table(cli_env: dict[str, str], tmp_path: Path) -> None:
    forager(tmp_path, cli_env, "db", "upgrade")
    dry = forager(tmp_path, cli_env, "prune", "--dry-run")
    assert "events: would delete 0 rows" in dry.stdout
    assert "alert_deliveries: would delete 0 rows" in dry.stdout
    done = forager(tmp_path, cli_env, "prune")
    assert "total: deleted 0 rows" in done.stdout


async def test_metrics_show_rows_and_bytes_per_table(api: httpx.AsyncClient) -> None:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    db = runtime.db
    async with db.session() as session:
        session.add_all(Event(entity_type="t", entity_id="1", event="x") for _ in range(40))
    async with db.session() as session:
        if not db.is_sqlite:  # the estimate comes from ANALYZE (all rows, for a small table)
            await session.execute(text("ANALYZE events"))
        n = await session.scalar(select(func.count()).select_from(Event))
    text_ = (await api.get("/metrics")).text
    assert f'forager_table_rows{{table="events"}} {n}\n' in text_
    size = re.search(r'forager_table_bytes\{table="events"\} (\d+)\n', text_)
    assert size is not None and int(size[1]) > 0
    assert 'forager_table_rows{table="price_history"} 0\n' in text_
    async with db.session() as session:
        session.add(Event(entity_type="t", entity_id="1", event="x"))
    # Cached: the next scrape within the minute does not read every table again.
    again = (await api.get("/metrics")).text
    assert f'forager_table_rows{{table="events"}} {n}\n' in again


async def test_the_scheduler_prunes_one_interval_after_start(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(retention_interval_seconds=0.3)
    db = await open_database(settings)
    try:
        old = utcnow() - timedelta(days=OLD)
        async with db.session() as session:
            session.add_all(
                Event(entity_type="t", entity_id="1", event="x", created_at=old) for _ in range(3)
            )

        async def pruned() -> bool | None:
            async with db.reader() as session:
                left = await session.scalar(select(func.count()).select_from(Event))
            return True if left == 0 else None

        assert await run_pool_until(db, settings, pruned, concurrency=1)
    finally:
        await db.dispose()
