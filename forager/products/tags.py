"""Product tags (issue 17): labels an operator puts on watched URLs to list, export and alert on
them as a group ("kettles", "black-friday").

Tags belong to a product URL (``product_tags.url_hash``), not to a product row: a URL submitted
with ``tags`` carries them from the start, and its product has them as soon as it is first
saved, with nothing copied on the task path. They are added on submission (API single and
batch, ``forager submit``; a duplicate submission adds its tags too), replaced per product
(``PATCH /api/products/{id}``) and added or removed in bulk (``POST /api/products/tags``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from sqlalchemy import ColumnElement, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.dialect import insert_ignoring_conflicts
from forager.db.engine import Database
from forager.db.models import TAG_PATTERN, Product, ProductTag
from forager.db.types import utcnow
from forager.errors import InvalidRequest, NotFound
from forager.products.records import grouped
from forager.queue.door import SubmitOutcome, SubmitSpec

TAG = TAG_PATTERN
TAG_QUERY = (
    r"^[a-z0-9][a-z0-9_.:-]{0,49}$"  # the same for query parameters (Rust regex: no look-ahead)
)
MAX_TAGS = 20  # per request
_TAG = re.compile(TAG)


def clean(tags: Iterable[str], field: str = "tags") -> list[str]:
    """``tags`` lowercased, de-duplicated in order, each checked (``InvalidRequest``)."""
    found: list[str] = []
    for raw in tags:
        tag = raw.strip().lower()
        if not _TAG.search(tag):
            raise InvalidRequest(
                f"tag {raw!r} must be 1-50 lowercase letters, digits, -, _, . or : "
                "(starting with a letter or digit)",
                field=field,
            )
        if tag not in found:
            found.append(tag)
    if len(found) > MAX_TAGS:
        raise InvalidRequest(f"at most {MAX_TAGS} tags", field=field)
    return found


def having(tag: str) -> ColumnElement[bool]:
    """Products with ``tag`` (for product filters; the tag index answers it)."""
    return Product.url_hash.in_(select(ProductTag.url_hash).where(ProductTag.tag == tag))


async def add(session: AsyncSession, url_hashes: Iterable[str], tags: Sequence[str]) -> None:
    """Tag every URL of ``url_hashes`` with ``tags`` (those it has already are kept)."""
    now = utcnow()
    rows = [{"url_hash": h, "tag": t, "created_at": now} for h in set(url_hashes) for t in tags]
    if rows:
        insert = insert_ignoring_conflicts(session, ProductTag.__table__, on=["url_hash", "tag"])
        await session.execute(insert, rows)


async def tag_submitted(
    db: Database, specs: Sequence[SubmitSpec], outcomes: Sequence[SubmitOutcome]
) -> None:
    """After a submit: the tags of each accepted URL (new or duplicate), in one transaction."""
    wanted: dict[tuple[str, ...], set[str]] = {}
    for spec, outcome in zip(specs, outcomes, strict=True):
        if spec.tags and outcome.url_hash is not None:
            wanted.setdefault(spec.tags, set()).add(outcome.url_hash)
    if not wanted:
        return
    async with db.session() as session:
        for tags, hashes in wanted.items():
            await add(session, hashes, tags)


async def of(session: AsyncSession, url_hashes: Iterable[str]) -> dict[str, list[str]]:
    """The tags of each URL hash, sorted (a URL without tags is missing)."""
    found = await grouped(session, ProductTag.url_hash, ProductTag.tag, url_hashes, ProductTag.tag)
    return dict(found)


async def _hashes(session: AsyncSession, product_ids: Sequence[int]) -> dict[int, str]:
    rows = await session.execute(
        select(Product.id, Product.url_hash).where(Product.id.in_(list(product_ids)))
    )
    return {row.id: row.url_hash for row in rows}


async def replace(db: Database, product_id: int, tags: Sequence[str]) -> list[str]:
    """Set a product's tags to exactly ``tags``; its tags afterwards."""
    async with db.session() as session:
        url_hash = (await _hashes(session, [product_id])).get(product_id)
        if url_hash is None:
            raise NotFound(f"product {product_id} does not exist")
        await session.execute(delete(ProductTag).where(ProductTag.url_hash == url_hash))
        await add(session, [url_hash], tags)
    return sorted(tags)


async def change(
    db: Database, product_ids: Sequence[int], *, add_tags: Sequence[str], remove: Sequence[str]
) -> list[int]:
    """Add and remove tags on many products at once; the ids that exist (others are skipped)."""
    async with db.session() as session:
        hashes = await _hashes(session, product_ids)
        if hashes and remove:
            await session.execute(
                delete(ProductTag).where(
                    ProductTag.url_hash.in_(list(hashes.values())), ProductTag.tag.in_(remove)
                )
            )
        await add(session, hashes.values(), add_tags)
    return sorted(hashes)
