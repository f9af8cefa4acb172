"""Feeds (issue 35): incremental runs, formats, a run cut off and done again, the S3 store."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import signal
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from sqlalchemy import insert, select, text, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Domain, Feed, FeedRun, Item, PriceHistory, Product
from forager.db.types import utcnow
from forager.feeds import admin, runs
from forager.feeds.admin import FeedSpec
from forager.store.backend import open_page_store
from forager.store.pages import LocalPageStore
from tests.support.cli import clean_env, forager
from tests.support.seaweed import ACCESS_KEY, SECRET_KEY
from tests.support.waiting import eventually


async def add_domain(db: Database, name: str = "shop.example") -> int:
    async with db.session() as session:
        domain = Domain(
            domain_name=name, base_url=f"https://{name}", parser_name="generic", user_agent="t"
        )
        session.add(domain)
        await session.flush()
        return domain.id


async def add_products(db: Database, domain_id: int, start: int, count: int) -> list[int]:
    rows = [
        {
            "domain_id": domain_id,
            "url": f"https://shop.example/p/{n}",
            "url_hash": f"{n:064d}",
            "product_name": f"Kettle {n}",
            "price": Decimal(n) + Decimal("0.99"),
            "currency": "EUR",
            "parser_name": "generic",
            "parser_version": "1",
            "content_hash": "c",
            "meta": {"n": n},
        }
        for n in range(start, start + count)
    ]
    async with db.session() as session:
        await session.execute(insert(Product), rows)
        found = await session.scalars(
            select(Product.id).where(Product.url_hash.in_([r["url_hash"] for r in rows]))
        )
        return sorted(found)


async def change_price(db: Database, product_id: int, price: str) -> None:
    async with db.session() as session:
        await session.execute(
            update(Product)
            .where(Product.id == product_id)
            .values(price=Decimal(price), updated_at=utcnow() + timedelta(seconds=1))
        )


def read_rows(path: Path, fmt: str) -> list[dict[str, Any]]:
    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    text = path.read_text()
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(text)))
    return [json.loads(line) for line in text.splitlines()]


def feed_files(settings: Settings) -> list[Path]:
    root = runs.feeds_root(settings)
    return sorted(p for p in root.rglob("feed-*") if p.is_file())


async def test_each_run_exports_what_changed_since_the_last_one(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    store = LocalPageStore(tmp_path / "pages")
    domain_id = await add_domain(db)
    first = await add_products(db, domain_id, 0, 5)
    formats = ("jsonl", "csv", "parquet")
    feeds = [
        await admin.create(
            db,
            FeedSpec(name=fmt, kind="products", format=fmt, destination="directory", path="out"),
        )
        for fmt in formats
    ]
    for fmt, feed in zip(formats, feeds, strict=True):
        run = await runs.run_now(db, settings, store, feed.id)
        assert (run.status, run.rows) == ("succeeded", 5)
        assert run.file == f"out/feed-{feed.id}-run-{run.id:08d}.{fmt}"
        rows = read_rows(runs.feeds_root(settings) / run.file, fmt)
        assert [int(r["id"]) for r in rows] == first
        assert rows[0]["price"] == "0.99" and rows[0]["product_name"] == "Kettle 0"

    # Nothing new: recorded, no file.
    empty = await runs.run_now(db, settings, store, feeds[0].id)
    assert (empty.status, empty.rows, empty.file) == ("succeeded", 0, None)

    second = await add_products(db, domain_id, 5, 2)
    await change_price(db, first[1], "42.00")
    for fmt, feed in zip(formats, feeds, strict=True):
        run = await runs.run_now(db, settings, store, feed.id)
        assert run.rows == 3
        rows = read_rows(runs.feeds_root(settings) / run.file, fmt)  # type: ignore[operator]
        assert sorted(int(r["id"]) for r in rows) == sorted([first[1], *second])
        assert next(r for r in rows if int(r["id"]) == first[1])["price"] == "42.00"
    assert len(feed_files(settings)) == 6
    history, total = await admin.runs(db, feeds[0].id, limit=10, offset=0)
    assert total == 3 and [r.rows for r in history] == [3, 0, 5]


async def test_a_run_cut_off_after_its_file_is_done_again_under_the_same_name(
    db: Database, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalPageStore(tmp_path / "pages")
    domain_id = await add_domain(db)
    ids = await add_products(db, domain_id, 0, 7)
    feed = await admin.create(
        db, FeedSpec(name="f", kind="products", format="jsonl", destination="directory")
    )
    real_finish = runs._finish

    async def crash(*args: Any) -> Any:
        raise RuntimeError("the database went away after the rename")

    monkeypatch.setattr(runs, "_finish", crash)
    failed = await runs.run_now(db, settings, store, feed.id)
    assert failed.status == "failed" and "went away" in (failed.error or "")
    assert len(feed_files(settings)) == 1  # renamed, not recorded
    monkeypatch.setattr(runs, "_finish", real_finish)

    await change_price(db, ids[0], "9.00")  # now past the cut-off run's range
    again = await runs.run_now(db, settings, store, feed.id)
    assert (again.id, again.status, again.attempts) == (failed.id, "succeeded", 2)
    nxt = await runs.run_now(db, settings, store, feed.id)
    files = feed_files(settings)
    assert len(files) == 2
    seen = [int(r["id"]) for f in files for r in read_rows(f, "jsonl")]
    assert sorted(seen) == ids and nxt.rows == 1


async def test_items_and_price_changes_narrowed_by_their_filters(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    store = LocalPageStore(tmp_path / "pages")
    shop = await add_domain(db)
    other = await add_domain(db, "other.example")
    mine = await add_products(db, shop, 0, 2)
    theirs = await add_products(db, other, 10, 1)
    async with db.session() as session:
        await session.execute(
            insert(PriceHistory),
            [{"product_id": p, "price": Decimal("5.5"), "currency": "EUR"} for p in mine + theirs],
        )
        await session.execute(
            insert(Item),
            [
                {
                    "domain_id": shop,
                    "kind": kind,
                    "item_key": f"{kind}-{n}",
                    "data": {"title": f"=cmd {n}", "n": n},
                    "content_hash": "h",
                    "version": 1,
                    "search_text": "",
                    "parser_name": "p",
                    "parser_version": "1",
                }
                for n, kind in enumerate(["ad", "ad", "listing"])
            ],
        )
    prices = await admin.create(
        db,
        FeedSpec(
            name="p",
            kind="price_changes",
            format="csv",
            destination="directory",
            domain="Shop.Example",
        ),
    )
    run = await runs.run_now(db, settings, store, prices.id)
    rows = read_rows(runs.feeds_root(settings) / run.file, "csv")  # type: ignore[operator]
    assert sorted(int(r["product_id"]) for r in rows) == mine
    assert rows[0]["price"] == "5.50" and rows[0]["url"].startswith("https://shop.example/")

    for fmt in ("csv", "parquet"):
        ads = await admin.create(
            db,
            FeedSpec(
                name=f"ads-{fmt}",
                kind="items",
                format=fmt,
                destination="directory",
                item_kind="ad",
            ),
        )
        run = await runs.run_now(db, settings, store, ads.id)
        rows = read_rows(runs.feeds_root(settings) / run.file, fmt)  # type: ignore[operator]
        assert [r["key"] for r in rows] == ["ad-0", "ad-1"]
        # data as one canonical JSON cell (CSV) or text column (Parquet)
        assert json.loads(rows[0]["data"]) == {"title": "=cmd 0", "n": 0}

    async with db.session() as session:  # an item's data changes: in the next run only
        await session.execute(
            update(Item)
            .where(Item.item_key == "ad-1")
            .values(data={"n": 9}, version=2, changed_at=utcnow() + timedelta(seconds=1))
        )
        await session.execute(  # seen again, unchanged: not exported again
            update(Item).where(Item.item_key == "ad-0").values(last_seen_at=utcnow())
        )
    run = await runs.run_now(db, settings, store, ads.id)
    rows = read_rows(runs.feeds_root(settings) / run.file, "parquet")  # type: ignore[operator]
    assert [(r["key"], r["version"]) for r in rows] == [("ad-1", 2)]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the engine is beside the point
async def test_the_store_destination_uploads_to_s3(
    db: Database, make_settings: Any, s3_server: Any, tmp_path: Path
) -> None:
    settings = make_settings(
        page_store=f"s3://{s3_server.place()}",
        s3_endpoint_url=s3_server.endpoint,
        s3_access_key_id=ACCESS_KEY,
        s3_secret_access_key=SECRET_KEY,
    )
    store = open_page_store(settings)
    try:
        ids = await add_products(db, await add_domain(db), 0, 3)
        feed = await admin.create(
            db,
            FeedSpec(
                name="s3", kind="products", format="parquet", destination="store", path="daily"
            ),
        )
        run = await runs.run_now(db, settings, store, feed.id)
        assert run.file == f"feeds/daily/feed-{feed.id}-run-{run.id:08d}.parquet"
        body = await store.get_blob(run.file)
        table = pq.read_table(io.BytesIO(body))
        assert table.column("id").to_pylist() == ids
        assert not list((runs.feeds_root(settings) / ".uploads").iterdir())
    finally:
        await store.aclose()


def test_a_feed_spec_is_checked_field_by_field() -> None:
    from forager.errors import InvalidRequest

    for changes, field in [
        ({"path": "../etc"}, "path"),
        ({"path": "/abs"}, "path"),
        ({"interval_seconds": 5}, "interval_seconds"),
        ({"item_kind": "ad"}, "item_kind"),
        ({"kind": "items", "tag": "sale"}, "tag"),
    ]:
        spec = FeedSpec(name="x", kind="products", format="csv", destination="directory")
        for key, value in changes.items():
            setattr(spec, key, value)
        with pytest.raises(InvalidRequest) as caught:
            admin.check(spec)
        assert caught.value.field == field
    fine = FeedSpec(
        name="x", kind="items", format="csv", destination="store", path="a/b.c", domain="Shop.X"
    )
    admin.check(fine)
    assert fine.domain == "shop.x"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the engine is beside the point
async def test_the_api_creates_runs_and_lists_feeds(api: Any) -> None:
    runtime = api.app.state.runtime
    await add_products(runtime.db, await add_domain(runtime.db), 0, 2)
    body = {"name": "k", "kind": "products", "format": "jsonl", "destination": "directory"}
    created = await api.post("/api/feeds", json=body)
    assert created.status_code == 201, created.text
    feed = created.json()
    assert (await api.post("/api/feeds", json=body)).status_code == 409
    bad = await api.post("/api/feeds", json={**body, "name": "b", "path": "a/../b"})
    assert bad.status_code == 422 and "path" in bad.text
    bad = await api.post("/api/feeds", json={**body, "name": "b", "format": "xml"})
    assert bad.status_code == 422 and "format" in bad.text
    read_only = {"Authorization": f"Bearer {api.keys['read']}"}
    assert (await api.post(f"/api/feeds/{feed['id']}/run", headers=read_only)).status_code == 403

    moved = await api.patch(f"/api/feeds/{feed['id']}", json={"interval_seconds": 600})
    assert moved.json()["interval_seconds"] == 600
    assert (await api.post(f"/api/feeds/{feed['id']}/run")).status_code == 202
    # The app's scheduler runs it; this process's own pass may be first (when the scheduler's
    # is, this one finds the feed leased and the run is waited for, however long it takes).
    await runs.run_due(runtime.db, runtime.settings, runtime.parts.pages, "test")

    async def succeeded() -> dict[str, Any] | None:
        listed: dict[str, Any] = (await api.get(f"/api/feeds/{feed['id']}/runs")).json()
        done = listed["items"] and all(r["status"] == "succeeded" for r in listed["items"])
        return listed if done else None

    listed = await eventually(succeeded, "the feed's run to succeed")
    # A feed is due once created: the app's scheduler may run it before the run asked for here
    # (CI once listed two runs). Either way each product is delivered once.
    assert listed["total"] in (1, 2) and listed["total"] == len(listed["items"])
    assert sum(r["rows"] for r in listed["items"]) == 2
    assert (await api.get("/api/feeds")).json()["items"][0]["cursor"] >= 2
    assert (await api.delete(f"/api/feeds/{feed['id']}")).status_code == 204
    assert (await api.get(f"/api/feeds/{feed['id']}")).status_code == 404


async def test_a_run_killed_mid_file_is_resumed_with_no_row_missed_or_repeated(
    db: Database, settings: Settings, db_url: str, tmp_path: Path
) -> None:
    """`forager feed run` is SIGKILLed while it writes a Parquet file; rows change meanwhile;
    the feed's next runs give every row exactly once, read back with pyarrow."""
    store = LocalPageStore(tmp_path / "pages")
    domain_id = await add_domain(db)
    ids = await add_products(db, domain_id, 0, 1000)
    feed = await admin.create(
        db, FeedSpec(name="big", kind="products", format="parquet", destination="directory")
    )
    env = {
        **clean_env(settings.data_dir),
        "FORAGER_DATABASE_URL": db_url,
        "FORAGER_FEED_CHUNK_ROWS": "5",  # 200 row groups: a run long enough to cut
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "forager.cli", "feed", "run", str(feed.id)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    tmp = runs.feeds_root(settings) / f".feed-{feed.id}-run-{1:08d}.parquet.tmp"
    try:
        for _ in range(1200):  # until the file has some row groups (or the command ended)
            if process.poll() is not None or (tmp.exists() and tmp.stat().st_size > 4096):
                break
            await asyncio.sleep(0.05)
        process.send_signal(signal.SIGKILL)
    finally:
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, stderr.decode()
    async with db.reader() as session:
        cut = await session.scalar(select(FeedRun).where(FeedRun.feed_id == feed.id))
    assert cut is not None and cut.status == "running" and feed_files(settings) == []

    # Writers go on meanwhile: a row of the cut run's range changes, new rows arrive.
    await change_price(db, ids[10], "77.00")
    later = await add_products(db, domain_id, 5000, 5)
    async with db.session() as session:  # the dead process's lease runs out
        await session.execute(update(Feed).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    resumed = await runs.run_now(db, settings, store, feed.id)
    assert (resumed.id, resumed.status, resumed.attempts) == (cut.id, "succeeded", 2)
    assert resumed.rows == 999  # its range less the row that changed since
    following = await runs.run_now(db, settings, store, feed.id)
    assert following.rows == 6

    files = feed_files(settings)
    assert len(files) == 2 and not tmp.exists()
    tables = [pq.read_table(f) for f in files]
    exported = [i for t in tables for i in t.column("id").to_pylist()]
    assert len(exported) == len(set(exported)) and sorted(exported) == sorted(ids + later)
    changed = [r for r in tables[1].to_pylist() if r["id"] == ids[10]]
    assert changed[0]["price"] == "77.00"


# SQLite writers serialize: B cannot commit while A is open.
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_a_row_committed_after_a_later_one_is_not_skipped(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """PostgreSQL: writer A draws a change number, writer B a higher one and commits first; the
    run's high-water mark waits for A, so A's row is in the run instead of behind the cursor."""
    store = LocalPageStore(tmp_path / "pages")
    domain_id = await add_domain(db)
    feed = await admin.create(
        db, FeedSpec(name="c", kind="products", format="jsonl", destination="directory")
    )
    async with db.engine.connect() as writer_a:
        transaction = await writer_a.begin()
        await writer_a.execute(
            insert(Product).values(
                domain_id=domain_id,
                url="https://shop.example/a",
                url_hash="a" * 64,
                product_name="A",
                parser_name="generic",
                parser_version="1",
                content_hash="c",
            )
        )
        [b_id] = await add_products(db, domain_id, 1, 1)  # committed, with a higher number
        run = asyncio.create_task(runs.run_now(db, settings, store, feed.id))

        async def run_waits_for_a() -> bool | None:
            async with db.reader() as session:
                waiting = await session.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()"
                    )
                )
            return True if waiting else None

        await eventually(run_waits_for_a, "the run waiting for writer A", timeout=20)
        await transaction.commit()
    done = await run
    rows = read_rows(runs.feeds_root(settings) / done.file, "jsonl")  # type: ignore[operator]
    assert sorted(r["product_name"] for r in rows) == ["A", "Kettle 1"]
    assert b_id in [r["id"] for r in rows]


def test_feeds_from_the_command_line(tmp_path: Path, cli_env: dict[str, str]) -> None:
    assert forager(tmp_path, cli_env, "db", "upgrade").returncode == 0
    base = ("feed", "create", "--name", "k", "--kind", "products")
    made = forager(tmp_path, cli_env, *base, "--format", "csv", "--path", "out")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("1\tk\tproducts\tcsv\tdirectory:out\tevery 3600 s\tenabled")
    bad = forager(tmp_path, cli_env, *base, "--format", "xml")
    assert bad.returncode == 1 and "--format: one of jsonl, csv, parquet" in bad.stderr
    ran = forager(tmp_path, cli_env, "feed", "run", "1")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\t")[1:4] == ["succeeded", "(0, 0]", "0 rows"]
    assert forager(tmp_path, cli_env, "feed", "runs", "1").stdout == ran.stdout
    assert "cursor 0" in forager(tmp_path, cli_env, "feed", "list").stdout
    missing = forager(tmp_path, cli_env, "feed", "run", "9")
    assert missing.returncode == 1 and "no feed 9" in missing.stderr
    assert forager(tmp_path, cli_env, "feed", "delete", "1").returncode == 0
    assert forager(tmp_path, cli_env, "feed", "list").stdout == ""
