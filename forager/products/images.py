"""Product images' download state: every read and write of it, in the caller's transaction.

A product's image rows are written by ``persist`` (the URLs, from the parse); the download
columns are written here only, by the worker's image downloader (``forager.worker.images``):

- ``claim`` leases due images of the domains that download them (``fetch_after`` moves past
  the lease; ``SKIP LOCKED`` on PostgreSQL, the write lock on SQLite), oldest first;
- ``stored`` / ``failed`` record the outcome, only while the row is still not done (a row the
  product replaced meanwhile is simply gone);
- ``stored_key`` finds the object an image with the same bytes is already stored under, so the
  same bytes are uploaded once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, distinct, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from forager.db.models import Domain, Product, ProductImage
from forager.db.types import utcnow
from forager.products.imagefile import ImageFile


@dataclass(frozen=True, slots=True)
class DueImage:
    """A leased image to download, with what its fetch needs to know of its product."""

    id: int
    url: str
    domain_id: int
    product_url: str  # the page it was found on: the egress policy's submitted URL
    attempts: int  # tries before this one


async def downloading_domains(session: AsyncSession) -> dict[int, Domain]:
    """The active domains with ``download_images`` on, by id (usually none: one cheap read)."""
    rows = await session.scalars(
        select(Domain)
        .where(Domain.download_images.is_(True), Domain.is_active.is_(True))
        .options(defer(Domain.robots_txt_content))
    )
    return {domain.id: domain for domain in rows}


def _due(now: datetime) -> list[ColumnElement[bool]]:
    return [
        ProductImage.fetched_at.is_(None),
        or_(ProductImage.fetch_after.is_(None), ProductImage.fetch_after <= now),
    ]


async def claim(
    session: AsyncSession, domain_ids: Sequence[int], limit: int, lease_seconds: float
) -> list[DueImage]:
    """Lease up to ``limit`` due images of ``domain_ids`` for ``lease_seconds``."""
    now = utcnow()
    rows = (
        await session.execute(
            select(
                ProductImage.id,
                ProductImage.image_url,
                Product.domain_id,
                Product.url,
                ProductImage.fetch_attempts,
            )
            .join(Product, Product.id == ProductImage.product_id)
            .where(*_due(now), Product.domain_id.in_(list(domain_ids)))
            .order_by(ProductImage.id)
            .limit(limit)
            .with_for_update(of=ProductImage, skip_locked=True)
        )
    ).all()
    if not rows:
        return []
    leased = set(
        (
            await session.execute(
                update(ProductImage)
                .where(ProductImage.id.in_([row.id for row in rows]), *_due(now))
                .values(fetch_after=now + timedelta(seconds=lease_seconds))
                .returning(ProductImage.id)
                .execution_options(synchronize_session=False)
            )
        ).scalars()
    )
    return [DueImage(*row) for row in rows if row.id in leased]


async def release(session: AsyncSession, image_ids: Sequence[int]) -> None:
    """Give leased images back untried (their domain's turn did not come in time)."""
    if image_ids:
        await session.execute(
            update(ProductImage)
            .where(ProductImage.id.in_(list(image_ids)), ProductImage.fetched_at.is_(None))
            .values(fetch_after=None)
            .execution_options(synchronize_session=False)
        )


async def stored_key(session: AsyncSession, content_hash: str) -> str | None:
    """The key an image with these bytes is already stored under, if any."""
    return await session.scalar(
        select(ProductImage.image_path)
        .where(ProductImage.content_hash == content_hash, ProductImage.image_path.is_not(None))
        .limit(1)
    )


async def stored(session: AsyncSession, image_id: int, key: str, image: ImageFile) -> None:
    """The image is stored under ``key``."""
    await session.execute(
        update(ProductImage)
        .where(ProductImage.id == image_id, ProductImage.fetched_at.is_(None))
        .values(
            image_path=key,
            content_hash=image.content_hash,
            content_type=image.content_type,
            width=image.width,
            height=image.height,
            file_size=image.size,
            fetched_at=utcnow(),
            fetch_after=None,
            fetch_attempts=ProductImage.fetch_attempts + 1,
            error=None,
        )
        .execution_options(synchronize_session=False)
    )


async def failed(session: AsyncSession, image_id: int, error: str, retry_in: float | None) -> None:
    """The try failed: again in ``retry_in`` seconds, or (``None``) never."""
    now = utcnow()
    done = (
        {"fetched_at": now, "fetch_after": None}
        if retry_in is None
        else {"fetch_after": now + timedelta(seconds=retry_in)}
    )
    await session.execute(
        update(ProductImage)
        .where(ProductImage.id == image_id, ProductImage.fetched_at.is_(None))
        .values(error=error[:2000], fetch_attempts=ProductImage.fetch_attempts + 1, **done)
        .execution_options(synchronize_session=False)
    )


async def postpone(session: AsyncSession, image_id: int, reason: str, seconds: float) -> None:
    """Not tried (no proxy free now, robots.txt unreachable): due again in ``seconds``, no
    attempt spent."""
    await session.execute(
        update(ProductImage)
        .where(ProductImage.id == image_id, ProductImage.fetched_at.is_(None))
        .values(error=reason[:2000], fetch_after=utcnow() + timedelta(seconds=seconds))
        .execution_options(synchronize_session=False)
    )


async def of_product(session: AsyncSession, product_id: int) -> list[ProductImage]:
    """A product's images, main image first."""
    return list(
        await session.scalars(
            select(ProductImage)
            .where(ProductImage.product_id == product_id)
            .order_by(ProductImage.position)
        )
    )


async def stored_totals(session: AsyncSession) -> tuple[int, int]:
    """Distinct stored images and their bytes (each stored object counted once)."""
    objects = (
        select(ProductImage.image_path, func.max(ProductImage.file_size).label("size"))
        .where(ProductImage.image_path.is_not(None), ProductImage.content_hash.is_not(None))
        .group_by(ProductImage.image_path)
        .subquery()
    )
    totals = select(func.count(distinct(objects.c.image_path)), func.sum(objects.c.size))
    count, size = (await session.execute(totals)).one()
    return int(count or 0), int(size or 0)
