"""The feeds API's service: create, read, change and delete feeds, their runs, run-now."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError

from forager.db.engine import Database
from forager.db.models import Feed, FeedRun
from forager.db.types import utcnow
from forager.errors import Conflict, InvalidRequest, NotFound

# A folder under the feeds directory or the store's feeds/ prefix: safe segments only.
_PATH = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._-]{0,63})(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,63}){0,7}")
MIN_INTERVAL_SECONDS = 60


@dataclass(slots=True)
class FeedSpec:
    """What a feed is; the API's and the CLI's bodies come here."""

    name: str
    kind: str
    format: str
    destination: str
    path: str = ""
    interval_seconds: int = 3600
    enabled: bool = True
    domain: str | None = None
    batch_name: str | None = None
    tag: str | None = None
    item_kind: str | None = None


def check(spec: FeedSpec) -> None:
    """InvalidRequest naming the field when the spec does not make a feed (a domain is
    lower-cased, as domains are stored)."""
    if spec.domain is not None:
        spec.domain = spec.domain.strip().lower()
    if spec.path and (not _PATH.fullmatch(spec.path) or ".." in spec.path.split("/")):
        raise InvalidRequest(
            "path: folders of letters, digits, '.', '_' and '-' joined by '/'", field="path"
        )
    if spec.interval_seconds < MIN_INTERVAL_SECONDS:
        raise InvalidRequest(
            f"interval_seconds: at least {MIN_INTERVAL_SECONDS}", field="interval_seconds"
        )
    if spec.item_kind is not None and spec.kind != "items":
        raise InvalidRequest("item_kind: only for feeds of items", field="item_kind")
    if spec.tag is not None and spec.kind == "items":
        raise InvalidRequest("tag: product tags filter products and price changes", field="tag")


def _not_found(feed_id: int) -> NotFound:
    return NotFound(f"no feed {feed_id}")


async def create(db: Database, spec: FeedSpec) -> Feed:
    check(spec)
    now = utcnow()
    values = {f.name: getattr(spec, f.name) for f in fields(FeedSpec)}
    try:
        async with db.session() as session:
            feed = Feed(**values, cursor=0, next_run_at=now)
            session.add(feed)
            await session.flush()
            session.expunge(feed)
    except IntegrityError as exc:
        raise Conflict(f"a feed named {spec.name!r} exists") from exc
    return feed


async def get(db: Database, feed_id: int) -> Feed:
    async with db.reader() as session:
        feed = await session.get(Feed, feed_id)
    if feed is None:
        raise _not_found(feed_id)
    return feed


async def list_page(db: Database, *, limit: int, offset: int) -> tuple[list[Feed], int]:
    async with db.reader() as session:
        total = await session.scalar(select(func.count()).select_from(Feed))
        rows = await session.scalars(select(Feed).order_by(Feed.id).limit(limit).offset(offset))
        return list(rows), int(total or 0)


async def change(db: Database, feed_id: int, changes: dict[str, Any]) -> Feed:
    """Change some of a feed's fields (what it exports from now on; its cursor stays)."""
    feed = await get(db, feed_id)
    spec = FeedSpec(**{f.name: getattr(feed, f.name) for f in fields(FeedSpec)})
    for name, value in changes.items():
        setattr(spec, name, value)
    check(spec)
    changed = {name: getattr(spec, name) for name in changes}
    try:
        async with db.session() as session:
            await session.execute(update(Feed).where(Feed.id == feed_id).values(**changed))
    except IntegrityError as exc:
        raise Conflict(f"a feed named {spec.name!r} exists") from exc
    return await get(db, feed_id)


async def remove(db: Database, feed_id: int) -> None:
    """Delete the feed and its runs' history (its files stay where they were written)."""
    async with db.session() as session:
        gone = await session.execute(delete(Feed).where(Feed.id == feed_id))
    if not getattr(gone, "rowcount", 0):
        raise _not_found(feed_id)


async def schedule_now(db: Database, feed_id: int) -> Feed:
    """Make the feed due now: the next scheduler pass runs it (if it is enabled)."""
    async with db.session() as session:
        moved = await session.execute(
            update(Feed).where(Feed.id == feed_id).values(next_run_at=utcnow())
        )
    if not getattr(moved, "rowcount", 0):
        raise _not_found(feed_id)
    return await get(db, feed_id)


async def runs(db: Database, feed_id: int, *, limit: int, offset: int) -> tuple[list[FeedRun], int]:
    """The feed's runs, newest first."""
    await get(db, feed_id)
    async with db.reader() as session:
        total = await session.scalar(
            select(func.count()).select_from(FeedRun).where(FeedRun.feed_id == feed_id)
        )
        rows = await session.scalars(
            select(FeedRun)
            .where(FeedRun.feed_id == feed_id)
            .order_by(FeedRun.id.desc())
            .limit(limit)
            .offset(offset)
        )
        return list(rows), int(total or 0)
