"""One feed run: claim the feed, export the rows since its cursor to a file, move the cursor.

The order makes a run exactly-once across crashes (a ``kill -9`` at any point):

1. The feed is leased (compare-and-set on its lease, renewed as the run goes), so one process
   runs it at a time.
2. The run row is written first, with its range ``(cursor, high]`` (``forager.feeds.cursor``)
   and its file name, and committed.
3. The rows of that range are written to a temporary file, fsynced, then renamed to the file's
   name (a directory) or uploaded under it (the page store: one PUT, whole or not at all).
4. One transaction moves the cursor to ``high`` (compare-and-set on the cursor and the lease)
   and marks the run succeeded.

A process killed before 4 leaves the run ``running`` (or ``failed``, with the error, after an
exception); whoever runs the feed next does that same run again — same range, same file name —
before any new one, so a file renamed but not yet recorded is replaced, not doubled. A row
updated since gets a number above the range and goes to the next run. An empty range writes no
file, but is recorded.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import insert, or_, select, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Feed, FeedRun
from forager.db.types import utcnow
from forager.errors import Conflict, ForagerError, NotFound
from forager.feeds import sources
from forager.feeds.cursor import high_water
from forager.feeds.formats import EXTENSIONS, MEDIA_TYPES, FileWriter, open_writer
from forager.store.pages import PageStore

log = logging.getLogger(__name__)
LEASE_SECONDS = 300.0
RETRY_SECONDS = 60  # a failed run is tried again after at most this long
_ERROR_CHARS = 2000


class LeaseLost(ForagerError):
    """Another process took the feed over (this one's lease expired mid-run)."""


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def feeds_root(settings: Settings) -> Path:
    """Where directory feeds write: ``<data_dir>/feeds``."""
    return settings.data_dir / "feeds"


def file_name(feed: Feed, run_id: int) -> str:
    return f"feed-{feed.id}-run-{run_id:08d}.{EXTENSIONS[feed.format]}"


@dataclass(slots=True)
class Lease:
    feed_id: int
    owner: str
    expires_at: datetime


async def claim(db: Database, feed_id: int, owner: str, *, due_only: bool) -> Feed | None:
    """Lease the feed (when due, if ``due_only``); None when it is not due or leased."""
    now = utcnow()
    conditions = [
        Feed.id == feed_id,
        or_(Feed.lease_owner.is_(None), Feed.lease_expires_at < now),
    ]
    if due_only:
        conditions += [Feed.enabled.is_(True), Feed.next_run_at <= now]
    async with db.session() as session:
        moved = await session.execute(
            update(Feed)
            .where(*conditions)
            .values(lease_owner=owner, lease_expires_at=now + timedelta(seconds=LEASE_SECONDS))
            .execution_options(synchronize_session=False)
        )
        if not getattr(moved, "rowcount", 0):
            return None
        feed = await session.get(Feed, feed_id)
        assert feed is not None
        session.expunge(feed)
        return feed


async def _renew(db: Database, lease: Lease) -> None:
    """Push the lease out when half of it has passed; LeaseLost when it is no longer ours."""
    now = utcnow()
    if lease.expires_at - now > timedelta(seconds=LEASE_SECONDS / 2):
        return
    expires = now + timedelta(seconds=LEASE_SECONDS)
    async with db.session() as session:
        moved = await session.execute(
            update(Feed)
            .where(Feed.id == lease.feed_id, Feed.lease_owner == lease.owner)
            .values(lease_expires_at=expires)
            .execution_options(synchronize_session=False)
        )
    if not getattr(moved, "rowcount", 0):
        raise LeaseLost(f"feed {lease.feed_id}: another process took it over")
    lease.expires_at = expires


async def _open_run(db: Database, feed: Feed) -> FeedRun:
    """The feed's unfinished run (done again), or a new one from its cursor."""
    async with db.session() as session:
        unfinished = await session.scalar(
            select(FeedRun)
            .where(FeedRun.feed_id == feed.id, FeedRun.status != "succeeded")
            .order_by(FeedRun.id)
            .limit(1)
        )
        if unfinished is not None:
            unfinished.status = "running"
            unfinished.attempts += 1
            await session.flush()
            session.expunge(unfinished)
            return unfinished
    high = max(await high_water(db, feed.kind), feed.cursor)
    async with db.session() as session:
        run_id = await session.scalar(
            insert(FeedRun)
            .values(
                feed_id=feed.id,
                status="running",
                from_seq=feed.cursor,
                to_seq=high,
                attempts=1,
                started_at=utcnow(),
            )
            .returning(FeedRun.id)
        )
        assert run_id is not None
        if high > feed.cursor:
            await session.execute(
                update(FeedRun)
                .where(FeedRun.id == run_id)
                .values(file=_target(feed, file_name(feed, run_id)))
            )
        run = await session.get(FeedRun, run_id)
        assert run is not None
        session.expunge(run)
        return run


def _target(feed: Feed, name: str) -> str:
    """Where the run's file goes, as shown: a path under the feeds directory, or a store key."""
    folder = feed.path.strip("/")
    if feed.destination == "store":
        return "/".join(p for p in ("feeds", folder, name) if p)
    return "/".join(p for p in (folder, name) if p)


async def _write(
    db: Database, settings: Settings, store: PageStore, feed: Feed, run: FeedRun, lease: Lease
) -> tuple[int, int]:
    """Write the run's rows to its file; (rows, bytes)."""
    assert run.file is not None
    if feed.destination == "directory":
        final = feeds_root(settings) / run.file
        tmp_dir = final.parent
    else:
        final = None
        tmp_dir = feeds_root(settings) / ".uploads"
    await asyncio.to_thread(tmp_dir.mkdir, parents=True, exist_ok=True)
    tmp = tmp_dir / f".{Path(run.file).name}.tmp"
    fields = sources.FIELDS[feed.kind]
    writer: FileWriter = await asyncio.to_thread(open_writer, tmp, feed.format, fields)
    rows = 0
    try:
        async for chunk in sources.chunks(
            db, feed, run.from_seq, run.to_seq, settings.feed_chunk_rows
        ):
            await asyncio.to_thread(writer.write, chunk.records)
            rows += len(chunk.records)
            await _renew(db, lease)
    finally:
        await asyncio.to_thread(writer.close)
    size = (await asyncio.to_thread(tmp.stat)).st_size
    if final is not None:
        await asyncio.to_thread(_rename, tmp, final)
    else:
        data = await asyncio.to_thread(tmp.read_bytes)
        await _renew(db, lease)
        await store.put_blob(run.file, data, MEDIA_TYPES[feed.format])
        await asyncio.to_thread(tmp.unlink)
    return rows, size


def _rename(tmp: Path, final: Path) -> None:
    os.replace(tmp, final)
    folder = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a power cut
    finally:
        os.close(folder)


async def _finish(
    db: Database, feed: Feed, run: FeedRun, lease: Lease, rows: int, size: int
) -> FeedRun:
    now = utcnow()
    async with db.session() as session:
        moved = await session.execute(
            update(Feed)
            .where(Feed.id == feed.id, Feed.lease_owner == lease.owner, Feed.cursor == run.from_seq)
            .values(
                cursor=run.to_seq,
                next_run_at=now + timedelta(seconds=feed.interval_seconds),
                lease_owner=None,
                lease_expires_at=None,
            )
            .execution_options(synchronize_session=False)
        )
        if not getattr(moved, "rowcount", 0):
            raise LeaseLost(f"feed {feed.id}: another process took it over")
        await session.execute(
            update(FeedRun)
            .where(FeedRun.id == run.id)
            .values(status="succeeded", rows=rows, bytes=size, error=None, finished_at=now)
        )
        done = await session.get(FeedRun, run.id)
        assert done is not None
        session.expunge(done)
        return done


async def _failed(db: Database, feed: Feed, run: FeedRun, lease: Lease, error: str) -> FeedRun:
    now = utcnow()
    retry = min(feed.interval_seconds, RETRY_SECONDS)
    async with db.session() as session:
        await session.execute(
            update(FeedRun)
            .where(FeedRun.id == run.id)
            .values(status="failed", error=error[:_ERROR_CHARS], finished_at=now)
        )
        await session.execute(
            update(Feed)
            .where(Feed.id == feed.id, Feed.lease_owner == lease.owner)
            .values(
                next_run_at=now + timedelta(seconds=retry),
                lease_owner=None,
                lease_expires_at=None,
            )
            .execution_options(synchronize_session=False)
        )
        done = await session.get(FeedRun, run.id)
        assert done is not None
        session.expunge(done)
        return done


async def run_feed(
    db: Database,
    settings: Settings,
    store: PageStore,
    feed_id: int,
    *,
    owner: str,
    due_only: bool = True,
) -> FeedRun | None:
    """Run the feed once if it can be leased (and is due, with ``due_only``); the run, or None
    when it was not run. A failure is recorded on the run (and logged), not raised."""
    feed = await claim(db, feed_id, owner, due_only=due_only)
    if feed is None:
        return None
    lease = Lease(feed.id, owner, utcnow() + timedelta(seconds=LEASE_SECONDS))
    run = await _open_run(db, feed)
    try:
        rows, size = (
            (0, 0) if run.file is None else await _write(db, settings, store, feed, run, lease)
        )
        return await _finish(db, feed, run, lease, rows, size)
    except LeaseLost:
        raise
    except Exception as exc:  # the destination or the database: recorded, tried again later
        log.warning("feed %d run %d failed: %s", feed.id, run.id, exc)
        return await _failed(db, feed, run, lease, str(exc) or type(exc).__name__)


async def run_now(db: Database, settings: Settings, store: PageStore, feed_id: int) -> FeedRun:
    """Run the feed at once, due or not (the CLI); Conflict when another process runs it."""
    async with db.reader() as session:
        feed = await session.get(Feed, feed_id)
    if feed is None:
        raise NotFound(f"no feed {feed_id}")
    run = await run_feed(db, settings, store, feed_id, owner=new_owner(), due_only=False)
    if run is None:
        raise Conflict(
            f"feed {feed_id} is being run by {feed.lease_owner} (lease until "
            f"{feed.lease_expires_at})"
        )
    return run


async def run_due(db: Database, settings: Settings, store: PageStore, owner: str) -> int:
    """Run every enabled feed that is due and not leased (the scheduler's side task); how many
    ran."""
    now = utcnow()
    async with db.reader() as session:
        due = list(
            await session.scalars(
                select(Feed.id)
                .where(
                    Feed.enabled.is_(True),
                    Feed.next_run_at <= now,
                    or_(Feed.lease_owner.is_(None), Feed.lease_expires_at < now),
                )
                .order_by(Feed.next_run_at)
            )
        )
    ran = 0
    for feed_id in due:
        if await run_feed(db, settings, store, feed_id, owner=owner) is not None:
            ran += 1
    return ran
