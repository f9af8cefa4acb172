"""Saving items: one row per ``(domain, kind, key)`` with its current data, and a version row
each time the canonical JSON changed; an unchanged recrawl moves ``last_seen_at`` only.

``save_items`` saves the items of a whole writer group in a few set-based statements: one
locked read of the existing rows, then multi-row inserts and updates (the products' shape,
forager/products/persist.py). A group without items costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.models import Item, ItemVersion
from forager.db.types import utcnow
from forager.parse.items import CheckedItem

SaveResult = Literal["created", "updated", "unchanged"]
MAX_SEARCH_TEXT = 20_000
_CHUNK = 500  # keys per locked read (well under every engine's bound-parameter limit)


@dataclass(frozen=True, slots=True)
class ItemBatch:
    """One page's items and where they were read (the page's URL, the parser)."""

    items: tuple[CheckedItem, ...]
    url: str | None
    parser_name: str
    parser_version: str


@dataclass(frozen=True, slots=True)
class ItemInput:
    """One page's items to save, for the task that read them."""

    domain_id: int
    task_id: int | None
    batch: ItemBatch


def search_text(data: Any) -> str:
    """Every text and number in ``data`` (keys excluded), lower-cased, space-separated."""
    return " ".join(_texts(data)).lower()[:MAX_SEARCH_TEXT]


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for inner in value.values():
            yield from _texts(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _texts(inner)
    elif isinstance(value, str):
        yield value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)


_ITEMS = cast(Table, Item.__table__)
_PROVENANCE = ("crawl_task_id", "url", "parser_name", "parser_version")
_SEEN = (
    update(_ITEMS)
    .where(_ITEMS.c.id == bindparam("b_id"))
    .values({**{k: bindparam(f"b_{k}") for k in _PROVENANCE}, "last_seen_at": bindparam("b_now")})
)
_CHANGED = (
    update(_ITEMS)
    .where(_ITEMS.c.id == bindparam("b_id"))
    .values(
        {
            **{k: bindparam(f"b_{k}") for k in _PROVENANCE},
            **{k: bindparam(f"b_{k}") for k in ("data", "content_hash", "version", "search_text")},
            "last_seen_at": bindparam("b_now"),
            "changed_at": bindparam("b_now"),
        }
    )
)


def _provenance(item: ItemInput) -> dict[str, Any]:
    batch = item.batch
    return {
        "crawl_task_id": item.task_id,
        "url": batch.url,
        "parser_name": batch.parser_name[:100],
        "parser_version": batch.parser_version[:50],
    }


async def save_items(
    session: AsyncSession, pages: Sequence[ItemInput]
) -> list[tuple[int, SaveResult]]:
    """Upsert every page's items; ``(item id, result)`` per distinct item, in page order.

    An item seen on two pages of one group is saved once, as the later page has it.
    """
    latest: dict[tuple[int, str, str], tuple[ItemInput, CheckedItem]] = {}
    for page in pages:
        for item in page.batch.items:
            triple = (page.domain_id, item.kind, item.key)
            latest.pop(triple, None)  # keeps the later page's place in the order
            latest[triple] = (page, item)
    if not latest:
        return []
    now = utcnow()
    existing = await _locked(session, list(latest))
    results: dict[tuple[int, str, str], tuple[int, SaveResult]] = {}
    new: list[tuple[int, str, str]] = []
    seen: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    versions: list[dict[str, Any]] = []
    for triple, (page, item) in latest.items():
        row = existing.get(triple)
        if row is None:
            new.append(triple)
            continue
        provenance = {f"b_{k}": v for k, v in _provenance(page).items()}
        if row.content_hash == item.content_hash:
            seen.append({"b_id": row.id, "b_now": now, **provenance})
            results[triple] = (row.id, "unchanged")
            continue
        version = row.version + 1
        changed.append(
            {
                "b_id": row.id,
                "b_now": now,
                "b_data": item.data,
                "b_content_hash": item.content_hash,
                "b_version": version,
                "b_search_text": search_text(item.data),
                **provenance,
            }
        )
        versions.append(_version_row(row.id, version, page, item, now))
        results[triple] = (row.id, "updated")
    if new:
        # Ids matched by their unique key, not by row order: asking RETURNING for the order of
        # the parameters makes SQLite insert one row per statement.
        inserted = await session.execute(
            insert(_ITEMS).returning(
                _ITEMS.c.domain_id, _ITEMS.c.kind, _ITEMS.c.item_key, _ITEMS.c.id
            ),
            [_new_row(*latest[triple], now) for triple in new],
        )
        ids = {(domain, kind, key): item_id for domain, kind, key, item_id in inserted}
        for triple in new:
            item_id = ids[triple]
            versions.append(_version_row(item_id, 1, *latest[triple], now))
            results[triple] = (item_id, "created")
    if seen:
        await session.execute(_SEEN, seen)
    if changed:
        await session.execute(_CHANGED, changed)
    if versions:
        await session.execute(insert(ItemVersion), versions)
    return [results[triple] for triple in latest]


async def _locked(session: AsyncSession, triples: list[tuple[int, str, str]]) -> dict[Any, Any]:
    """The existing rows of ``triples``, locked until the transaction ends."""
    found: dict[tuple[int, str, str], Any] = {}
    wanted = set(triples)
    domains = sorted({t[0] for t in triples})
    keys = sorted({t[2] for t in triples})
    for start in range(0, len(keys), _CHUNK):
        rows = await session.execute(
            select(
                _ITEMS.c.id,
                _ITEMS.c.domain_id,
                _ITEMS.c.kind,
                _ITEMS.c.item_key,
                _ITEMS.c.content_hash,
                _ITEMS.c.version,
            )
            .where(
                _ITEMS.c.domain_id.in_(domains),
                _ITEMS.c.item_key.in_(keys[start : start + _CHUNK]),
            )
            .with_for_update()
        )
        for row in rows:
            triple = (row.domain_id, row.kind, row.item_key)
            if triple in wanted:
                found[triple] = row
    return found


def _new_row(page: ItemInput, item: CheckedItem, now: datetime) -> dict[str, Any]:
    return {
        "domain_id": page.domain_id,
        "kind": item.kind,
        "item_key": item.key,
        "data": item.data,
        "content_hash": item.content_hash,
        "version": 1,
        "search_text": search_text(item.data),
        **_provenance(page),
        "first_seen_at": now,
        "last_seen_at": now,
        "changed_at": now,
    }


def _version_row(
    item_id: int, version: int, page: ItemInput, item: CheckedItem, now: datetime
) -> dict[str, Any]:
    return {
        "item_id": item_id,
        "version": version,
        "data": item.data,
        "content_hash": item.content_hash,
        **_provenance(page),
        "recorded_at": now,
    }
