"""Products: list and inspect extracted products with their images and price history."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.api.deps import PagingDep, ReadSessionDep
from forager.api.schemas import Page, PricePoint, ProductDetail, ProductPublic
from forager.db.models import Domain, PriceHistory, Product, ProductImage
from forager.errors import NotFound

router = APIRouter(prefix="/api/products", tags=["products"])


async def _images(session: AsyncSession, ids: Sequence[int]) -> dict[int, list[str]]:
    images: dict[int, list[str]] = defaultdict(list)
    if ids:
        rows = await session.execute(
            select(ProductImage.product_id, ProductImage.image_url)
            .where(ProductImage.product_id.in_(ids))
            .order_by(ProductImage.product_id, ProductImage.position)
        )
        for product_id, url in rows:
            images[product_id].append(url)
    return images


def _public(product: Product, images: list[str]) -> ProductPublic:
    data = {c: getattr(product, c) for c in ProductPublic.model_fields if c != "image_urls"}
    return ProductPublic(**data, image_urls=images)


@router.get("", operation_id="list_products")
async def list_products(
    session: ReadSessionDep,
    paging: PagingDep,
    domain: Annotated[str | None, Query(max_length=255, description="Domain name.")] = None,
) -> Page[ProductPublic]:
    """Products, most recently updated first."""
    query = select(Product)
    if domain is not None:
        query = query.join(Domain, Domain.id == Product.domain_id).where(
            Domain.domain_name == domain.lower()
        )
    total = await session.scalar(select(func.count()).select_from(query.subquery()))
    products = list(
        await session.scalars(
            query.order_by(Product.updated_at.desc(), Product.id.desc())
            .limit(paging.limit)
            .offset(paging.offset)
        )
    )
    images = await _images(session, [p.id for p in products])
    return Page(
        items=[_public(p, images[p.id]) for p in products],
        total=total or 0,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.get("/{product_id}", operation_id="get_product")
async def get_product(product_id: int, session: ReadSessionDep) -> ProductDetail:
    """One product with its images and full price history (oldest first)."""
    product = await session.get(Product, product_id)
    if product is None:
        raise NotFound(f"product {product_id} does not exist")
    images = await _images(session, [product_id])
    history = await session.scalars(
        select(PriceHistory)
        .where(PriceHistory.product_id == product_id)
        .order_by(PriceHistory.recorded_at, PriceHistory.id)
    )
    return ProductDetail(
        **_public(product, images[product_id]).model_dump(),
        price_history=[PricePoint.model_validate(h) for h in history],
    )
