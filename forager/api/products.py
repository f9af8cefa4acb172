"""Products: list, search, export and inspect extracted products (images, price history)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from forager.api.auth import ApiKeyDep
from forager.api.deps import EntityId, PagingDep, ReadSessionDep, Runtime, RuntimeDep
from forager.api.pages import paged
from forager.api.schemas import (
    Page,
    PricePoint,
    ProductDetail,
    ProductPublic,
    ProductsTagged,
    ProductTagChange,
    ProductUpdate,
)
from forager.api.wire import QueryMoney, Timestamp
from forager.db.models import PriceHistory, Product
from forager.db.queries import page, page_and_total
from forager.errors import NotFound
from forager.products import export, search, tags
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
            description="Full-text search over name, brand and description; ranks by relevance.",
        ),
    ] = None,
    tag: Annotated[
        str | None,
        Query(pattern=tags.TAG_QUERY, max_length=50, description="Only products with this tag."),
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
    )


FiltersDep = Annotated[ProductFilters, Depends(product_filters)]


@router.get("", operation_id="list_products")
async def list_products(
    session: ReadSessionDep, paging: PagingDep, filters: FiltersDep
) -> Page[ProductPublic]:
    """Products, most recently updated first; by relevance (best first) with ``q``."""
    dialect = session.get_bind().dialect.name
    query, count = search.list_query(dialect, filters)
    # PostgreSQL: one full-text search for the page and its total (FTS5's bm25() cannot sit
    # beside a window function; SQLite counts its FTS matches cheaply anyway).
    if filters.searching and dialect == "postgresql":
        products, total = await page_and_total(
            session, query, limit=paging.limit, offset=paging.offset
        )
    else:
        total = await session.scalar(count) or 0
        products = list(await session.scalars(query.limit(paging.limit).offset(paging.offset)))
    images = await image_urls(session, [p.id for p in products])
    tagged = await tags.of(session, [p.url_hash for p in products])
    return Page(
        items=[_public(p, images[p.id], tagged.get(p.url_hash, [])) for p in products],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


def _export(runtime: Runtime, filters: ProductFilters, fmt: export.Format) -> StreamingResponse:
    media_type, extension = export.FORMATS[fmt]
    return StreamingResponse(
        export.stream(runtime.db, filters, fmt),
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="products.{extension}"'},
    )


@router.get(
    "/export.csv",
    operation_id="export_products_csv",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/csv": {}}, "description": "One row per product."}},
)
async def export_products_csv(runtime: RuntimeDep, filters: FiltersDep) -> StreamingResponse:
    """Every matching product as CSV (header row; image_urls joined by spaces), by id."""
    return _export(runtime, filters, "csv")


@router.get(
    "/export.jsonl",
    operation_id="export_products_jsonl",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"application/x-ndjson": {}},
            "description": "One product record per line.",
        }
    },
)
async def export_products_jsonl(runtime: RuntimeDep, filters: FiltersDep) -> StreamingResponse:
    """Every matching product as JSON Lines (one product record per line), by id."""
    return _export(runtime, filters, "jsonl")


# The detail shows this many of the newest price points; /price-history pages through all.
DETAIL_ROWS = 100
_NO_PRODUCT: dict[int | str, dict[str, Any]] = {404: {"description": "No such product."}}


async def _product_or_404(session: ReadSessionDep, product_id: int) -> Product:
    product = await session.get(Product, product_id)
    if product is None:
        raise NotFound(f"product {product_id} does not exist")
    return product


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
