"""Products: list, search, export and inspect extracted products (images, price history)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response, StreamingResponse
from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.api.auth import ApiKeyDep
from forager.api.deps import EntityId, Paging, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.downloads import described, download
from forager.api.pages import Page, paged
from forager.api.product_schemas import (
    PricePoint,
    ProductDetail,
    ProductImagePublic,
    ProductPublic,
    ProductsTagged,
    ProductTagChange,
    ProductUpdate,
)
from forager.api.wire import QueryMoney, Timestamp
from forager.db.models import PriceHistory, Product, ProductImage
from forager.db.queries import get_or_not_found, page
from forager.errors import NotFound, PageStoreError
from forager.products import export, images, search, tags
from forager.products.records import image_urls
from forager.products.search import ProductFilters

router = APIRouter(prefix="/api/products", tags=["products"])


def _public(product: Product, images: list[str], tagged: list[str]) -> ProductPublic:
    data = {
        c: getattr(product, c)
        for c in ProductPublic.model_fields
        if c not in ("image_urls", "tags")
    }
    return ProductPublic(**data, image_urls=images, tags=tagged)


def product_filters(
    min_price: Annotated[QueryMoney | None, Query(description="Price ≥.")] = None,
    max_price: Annotated[
        QueryMoney | None, Query(description="Price ≤ (below min_price: nothing matches).")
    ] = None,
    currency: Annotated[
        str | None, Query(pattern=r"^[A-Za-z]{3}$", description="ISO 4217 code, e.g. USD.")
    ] = None,
    is_available: Annotated[bool | None, Query(description="In stock or not.")] = None,
    availability: Annotated[
        str | None, Query(max_length=255, description="Exact availability text.")
    ] = None,
    brand: Annotated[
        str | None, Query(max_length=255, description="Brand contains (any case).")
    ] = None,
    category: Annotated[
        str | None, Query(max_length=512, description="Category contains (any case).")
    ] = None,
    domain: Annotated[str | None, Query(max_length=255, description="Domain name.")] = None,
    changed_since: Annotated[
        Timestamp | None, Query(description="Updated at or after this time.")
    ] = None,
    q: Annotated[
        str | None,
        Query(
            max_length=500,
            description=(
                "Full-text search over name, brand and description; ranks by relevance. When "
                "more than 10,000 products contain the words, the newest 10,000 of them are "
                "ranked and the others follow, newest first, and total stops counting at "
                "10,000 (total_exact false). One word with a digit that is some products' SKU "
                "or ASIN exactly finds those products (with the other filters)."
            ),
        ),
    ] = None,
    tag: Annotated[
        str | None,
        Query(pattern=tags.TAG_QUERY, max_length=50, description="Only products with this tag."),
    ] = None,
    sku: Annotated[
        str | None,
        Query(min_length=1, max_length=100, description="The shop's article number (exact)."),
    ] = None,
    gtin: Annotated[
        str | None,
        Query(
            pattern=r"^[0-9][0-9 -]{6,20}$",
            description="GTIN / EAN / UPC (exact; spaces and hyphens ignored).",
        ),
    ] = None,
    asin: Annotated[
        str | None,
        Query(pattern=r"^[A-Za-z0-9]{10}$", description="Amazon's ASIN (exact, any case)."),
    ] = None,
    min_rating: Annotated[
        QueryMoney | None, Query(description="Rating ≥ (products without one never match).")
    ] = None,
) -> ProductFilters:
    return ProductFilters(
        min_price=min_price,
        max_price=max_price,
        currency=currency,
        is_available=is_available,
        availability=availability,
        brand=brand,
        category=category,
        domain=domain,
        changed_since=changed_since,
        q=q,
        tag=tag,
        sku=sku,
        gtin=gtin.replace(" ", "").replace("-", "") if gtin is not None else None,
        asin=asin.upper() if asin is not None else None,
        min_rating=min_rating,
    )


FiltersDep = Annotated[ProductFilters, Depends(product_filters)]
ProductSort = Literal[
    "-updated",
    "updated",
    "-changed",
    "changed",
    "price",
    "-price",
    "rating",
    "-rating",
    "name",
    "-name",
]
SortDep = Annotated[
    ProductSort | None,
    Query(
        description="The order: by last change (updated and changed are the same: a product "
        "is updated only when its content changed), price, rating or name; a leading - is "
        "highest (or newest) first; products without a price or rating come last either way. "
        "Default: by relevance with q, else -updated; exports: by id."
    ),
]
_CODE = re.compile(r"^(?=.*\d)[\w.\-/]{2,100}$")  # one word with a digit: may be a SKU


async def _sorted(
    session: AsyncSession, dialect: str, filters: ProductFilters, paging: Paging, sort: str
) -> tuple[list[Product], int]:
    """A page in the ``sort`` order (a search's matches too, counted exactly)."""
    query, _ = search.filtered(dialect, filters)
    count, _ = search.filtered(dialect, filters, func.count(Product.id))
    page = query.order_by(*search.ordering(sort)).limit(paging.limit).offset(paging.offset)
    return list(await session.scalars(page)), await session.scalar(count) or 0


async def _by_code(
    session: AsyncSession, dialect: str, filters: ProductFilters, paging: Paging, sort: str | None
) -> tuple[list[Product], int] | None:
    """The page of products whose SKU or ASIN is exactly ``q`` (within the other filters), when
    there are any: an item number is not a word the full-text index knows."""
    code = (filters.q or "").strip()
    if not _CODE.match(code):
        return None
    query, count = search.list_query(dialect, replace(filters, q=None))
    match = or_(Product.sku == code, Product.asin == code)
    total = await session.scalar(count.where(match)) or 0
    if not total:
        return None
    if sort is not None:
        query = query.order_by(None).order_by(*search.ordering(sort))
    page = query.where(match).limit(paging.limit).offset(paging.offset)
    return list(await session.scalars(page)), total


@router.get("", operation_id="list_products")
async def list_products(
    session: ReadSessionDep, paging: PagingDep, filters: FiltersDep, sort: SortDep = None
) -> Page[ProductPublic]:
    """Products, most recently updated first; by relevance (best first) with ``q``; or in the
    ``sort`` order."""
    dialect = session.get_bind().dialect.name
    exact = True
    by_code = await _by_code(session, dialect, filters, paging, sort)
    if by_code is not None:
        products, total = by_code
    elif sort is not None:
        products, total = await _sorted(session, dialect, filters, paging, sort)
    elif filters.searching:
        products, total, exact = await search.search_page(
            session, dialect, filters, limit=paging.limit, offset=paging.offset
        )
    else:
        query, count = search.list_query(dialect, filters)
        total = await session.scalar(count) or 0
        products = list(await session.scalars(query.limit(paging.limit).offset(paging.offset)))
    images = await image_urls(session, [p.id for p in products])
    tagged = await tags.of(session, [p.url_hash for p in products])
    return Page(
        items=[_public(p, images[p.id], tagged.get(p.url_hash, [])) for p in products],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
        total_exact=exact,
    )


@router.get(
    "/export.csv",
    operation_id="export_products_csv",
    response_class=StreamingResponse,
    responses=described("csv", "One row per product."),
)
async def export_products_csv(
    runtime: RuntimeDep, filters: FiltersDep, sort: SortDep = None
) -> StreamingResponse:
    """Every matching product as CSV (header row; image_urls joined by spaces), by id or in
    the ``sort`` order."""
    body = export.stream(runtime.db, filters, "csv", sort=sort)
    return download(body, "csv", "products")


@router.get(
    "/export.jsonl",
    operation_id="export_products_jsonl",
    response_class=StreamingResponse,
    responses=described("jsonl", "One product record per line."),
)
async def export_products_jsonl(
    runtime: RuntimeDep, filters: FiltersDep, sort: SortDep = None
) -> StreamingResponse:
    """Every matching product as JSON Lines (one product record per line), by id or in the
    ``sort`` order."""
    body = export.stream(runtime.db, filters, "jsonl", sort=sort)
    return download(body, "jsonl", "products")


# The detail shows this many of the newest price points; /price-history pages through all.
DETAIL_ROWS = 100
_NO_PRODUCT: dict[int | str, dict[str, Any]] = {404: {"description": "No such product."}}


async def _product_or_404(session: ReadSessionDep, product_id: int) -> Product:
    missing = f"product {product_id} does not exist"
    return await get_or_not_found(session, Product, product_id, missing)


def _history_of(product_id: int) -> Any:
    return select(PriceHistory).where(PriceHistory.product_id == product_id)


@router.get("/{product_id:int}", operation_id="get_product", responses=_NO_PRODUCT)
async def get_product(product_id: EntityId, session: ReadSessionDep) -> ProductDetail:
    """One product with its images and newest price points (oldest first among them)."""
    product = await _product_or_404(session, product_id)
    images = await image_urls(session, [product_id])
    tagged = await tags.of(session, [product.url_hash])
    newest = (PriceHistory.recorded_at.desc(), PriceHistory.id.desc())
    history, total = await page(
        session, _history_of(product_id), *newest, limit=DETAIL_ROWS, offset=0
    )
    return ProductDetail(
        **_public(product, images[product_id], tagged.get(product.url_hash, [])).model_dump(),
        price_history=[PricePoint.model_validate(h) for h in reversed(history)],
        price_history_total=total,
    )


@router.get(
    "/{product_id:int}/price-history", operation_id="list_price_history", responses=_NO_PRODUCT
)
async def list_price_history(
    product_id: EntityId, session: ReadSessionDep, paging: PagingDep
) -> Page[PricePoint]:
    """A product's whole price history, oldest first, a page at a time."""
    await _product_or_404(session, product_id)
    oldest = (PriceHistory.recorded_at, PriceHistory.id)
    return await paged(session, _history_of(product_id), oldest, paging, PricePoint)


def _image_public(image: ProductImage) -> ProductImagePublic:
    stored = image.image_path is not None and image.content_type is not None
    content_url = f"/api/products/{image.product_id}/images/{image.id}/content" if stored else None
    return ProductImagePublic.model_validate(
        {
            **{
                name: getattr(image, name)
                for name in ProductImagePublic.model_fields
                if hasattr(image, name)
            },
            "stored": stored,
            "content_url": content_url,
        }
    )


@router.get("/{product_id:int}/images", operation_id="list_product_images", responses=_NO_PRODUCT)
async def list_product_images(
    product_id: EntityId, session: ReadSessionDep
) -> list[ProductImagePublic]:
    """A product's images, main image first, with their stored copies (domains with
    ``download_images``) and why a download failed."""
    await _product_or_404(session, product_id)
    return [_image_public(image) for image in await images.of_product(session, product_id)]


# A stored image is served as the type read from its bytes, never sniffed, never run.
_IMAGE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    # The bytes under a key never change (the key is their hash): cache in the browser only.
    "Cache-Control": "private, max-age=86400",
}


@router.get(
    "/{product_id:int}/images/{image_id:int}/content",
    operation_id="get_product_image_content",
    response_class=Response,
    responses={
        200: {
            "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}},
            "description": "The stored image, as the type read from its bytes.",
        },
        404: {"description": "No such product image, or it is not stored."},
    },
)
async def get_product_image_content(
    product_id: EntityId, image_id: EntityId, session: ReadSessionDep, runtime: RuntimeDep
) -> Response:
    """The stored copy of a product image, from Forager's page store."""
    image = await session.get(ProductImage, image_id)
    if image is None or image.product_id != product_id:
        raise NotFound(f"product {product_id} has no image {image_id}")
    if image.image_path is None or image.content_type is None:
        raise NotFound(f"image {image_id} of product {product_id} is not stored")
    try:
        body = await runtime.pages.get_blob(image.image_path)
    except PageStoreError as exc:
        raise NotFound(f"the stored copy of image {image_id} cannot be read") from exc
    headers = {**_IMAGE_HEADERS, "ETag": f'"{image.content_hash}"'}
    return Response(body, media_type=image.content_type, headers=headers)


@router.patch("/{product_id:int}", operation_id="update_product", responses=_NO_PRODUCT)
async def update_product(
    product_id: EntityId, body: ProductUpdate, runtime: RuntimeDep, _key: ApiKeyDep
) -> ProductDetail:
    """Set a product's tags (the whole list: ``[]`` removes them all)."""
    await tags.replace(runtime.db, product_id, tags.clean(body.tags))
    async with runtime.db.reader() as session:
        return await get_product(product_id, session)


@router.post("/tags", operation_id="tag_products")
async def tag_products(
    body: ProductTagChange, runtime: RuntimeDep, _key: ApiKeyDep
) -> ProductsTagged:
    """Add and remove tags on many products at once (ids that do not exist are skipped)."""
    changed = await tags.change(
        runtime.db,
        body.product_ids,
        add_tags=tags.clean(body.add, "add"),
        remove=tags.clean(body.remove, "remove"),
    )
    return ProductsTagged(updated=len(changed), product_ids=changed)
