"""A domain's selector parsers: save a map as a new version, list versions, use one, preview
an unsaved map on a stored page and compare it with the parser in use on the newest stored
pages (in the parse processes, within their time budget)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path

from forager.api.deps import EntityId, PagingDep, ReadSessionDep, Runtime, RuntimeDep
from forager.api.pages import Page
from forager.api.selector_schemas import (
    FieldSummaryPublic,
    PageComparisonPublic,
    SelectorCompareIn,
    SelectorComparison,
    SelectorMapIn,
    SelectorParserList,
    SelectorParserPublic,
    SelectorPreview,
    SelectorPreviewIn,
    StoredPagePublic,
)
from forager.db import audit
from forager.db.models import SelectorMapVersion
from forager.domains import comparison, selectors
from forager.domains.selectors import StoredPage
from forager.errors import ForagerError
from forager.parse.selectors import ITEMS, SELECTOR, compile_map
from forager.worker.parsing import ParseJob

router = APIRouter(prefix="/api/domains/{domain_id:int}", tags=["selector parsers"])

Version = Annotated[int, Path(ge=1, le=2**31 - 1, description="A version of the map.")]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such domain."}}
_NO_VERSION: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such domain, or no such version."}
}


def _public(row: SelectorMapVersion, in_use: bool) -> SelectorParserPublic:
    return SelectorParserPublic(
        id=row.id,
        domain_id=row.domain_id,
        version=row.version,
        fields=row.fields,
        note=row.note,
        created_by=row.created_by,
        created_at=row.created_at,
        in_use=in_use,
    )


@router.post(
    "/selector-parsers",
    operation_id="save_selector_parser",
    status_code=201,
    responses=_NOT_FOUND,
)
async def save_selector_parser(
    domain_id: EntityId, body: SelectorMapIn, runtime: RuntimeDep
) -> SelectorParserPublic:
    """Save the map as the domain's next version (used from now on unless ``use`` is false).
    Stored pages are read with it again by restart-parsing (no refetch)."""
    row, in_use = await selectors.save(
        runtime.db, domain_id, body.fields, body.note, use=body.use, by=audit.ACTOR.get() or "api"
    )
    return _public(row, in_use)


@router.get("/selector-parsers", operation_id="list_selector_parsers", responses=_NOT_FOUND)
async def list_selector_parsers(
    domain_id: EntityId, session: ReadSessionDep, paging: PagingDep
) -> SelectorParserList:
    """The domain's saved versions, newest first, and the one in use."""
    rows, total, in_use = await selectors.versions(
        session, domain_id, limit=paging.limit, offset=paging.offset
    )
    return SelectorParserList(
        items=[_public(r, r.version == in_use) for r in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
        in_use=in_use,
    )


@router.get(
    "/selector-parsers/{version:int}", operation_id="get_selector_parser", responses=_NO_VERSION
)
async def get_selector_parser(
    domain_id: EntityId, version: Version, session: ReadSessionDep
) -> SelectorParserPublic:
    """One saved version."""
    return _public(*await selectors.one(session, domain_id, version))


@router.post(
    "/selector-parsers/{version:int}/use", operation_id="use_selector_parser", responses=_NO_VERSION
)
async def use_selector_parser(
    domain_id: EntityId, version: Version, runtime: RuntimeDep
) -> SelectorParserPublic:
    """Parse the domain's pages with this version from now on (e.g. roll back)."""
    row = await selectors.use(runtime.db, domain_id, version, audit.ACTOR.get() or "api")
    return _public(row, True)


@router.get("/stored-pages", operation_id="list_stored_pages", responses=_NOT_FOUND)
async def list_stored_pages(
    domain_id: EntityId, session: ReadSessionDep, paging: PagingDep
) -> Page[StoredPagePublic]:
    """The domain's pages in the page store, newest first: what a map can be previewed on."""
    pages, total = await selectors.stored_pages(
        session, domain_id, limit=paging.limit, offset=paging.offset
    )
    return Page(
        items=[StoredPagePublic.model_validate(p) for p in pages],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.post(
    "/selector-parsers/preview",
    operation_id="preview_selector_parser",
    responses={404: {"description": "No such domain, or the task has no stored page of it."}},
)
async def preview_selector_parser(
    domain_id: EntityId, body: SelectorPreviewIn, runtime: RuntimeDep
) -> SelectorPreview:
    """Run an unsaved map on one stored page of the domain: every field's value and error, and
    the items its item extractors read."""
    compile_map(body.fields)  # a bad rule: 422 naming it, before any page is read
    async with runtime.db.reader() as session:
        stored = await selectors.stored_page(session, domain_id, body.task_id)
    html = await runtime.pages.get(stored.html_path)
    job = ParseJob(
        stored.url,
        SELECTOR,
        html,
        fetched=False,
        selector=(domain_id, 0, body.fields),
        preview=True,
    )
    parsed = await runtime.parts.parser.parse(job)
    values, errors = parsed.fields or ({}, {})
    items = values.pop(ITEMS, None) or []
    error = parsed.error[1] if parsed.error else None
    return SelectorPreview(
        task_id=stored.task_id,
        url=stored.url,
        values=values,
        items=items,
        errors=errors,
        error=error,
    )


async def _read(runtime: Runtime, job: ParseJob) -> tuple[dict[str, Any] | None, str | None]:
    """The product a parse job reads as JSON, or None and why not."""
    parsed = await runtime.parts.parser.parse(job)
    if parsed.error is not None:
        return None, parsed.error[1]
    if parsed.record is None:
        return None, "no product on the page (items only)"
    return parsed.record.to_json(), None


async def _compare_page(
    runtime: Runtime,
    domain_id: int,
    stored: StoredPage,
    current: tuple[str, tuple[int, int, dict[str, Any]] | None],
    fields: dict[str, Any],
) -> comparison.PageComparison:
    try:
        html = await runtime.pages.get(stored.html_path)
    except ForagerError as exc:
        unread = (None, exc.message)
        return comparison.compare_page(stored.task_id, stored.url, unread, unread)
    name, in_use = current
    now = ParseJob(stored.url, name, html, fetched=False, selector=in_use)
    trial = ParseJob(stored.url, SELECTOR, html, fetched=False, selector=(domain_id, 0, fields))
    before, after = await asyncio.gather(_read(runtime, now), _read(runtime, trial))
    return comparison.compare_page(stored.task_id, stored.url, before, after)


@router.post(
    "/selector-parsers/compare", operation_id="compare_selector_parser", responses=_NOT_FOUND
)
async def compare_selector_parser(
    domain_id: EntityId, body: SelectorCompareIn, runtime: RuntimeDep
) -> SelectorComparison:
    """Read the domain's newest stored pages with an unsaved map and with the parser in use:
    per page and field both values and what the map does (added, changed, lost, same), and
    per field how many pages of each. Fields the map has no rule for fall back to the generic
    parser, as they would once saved."""
    compile_map(body.fields)  # a bad rule: 422 naming it, before any page is read
    async with runtime.db.reader() as session:
        current = await selectors.current_parser(session, domain_id)
        stored, _ = await selectors.stored_pages(session, domain_id, limit=body.pages, offset=0)
    # One page at a time: the parse processes keep room for the crawl's pages meanwhile.
    pages = [await _compare_page(runtime, domain_id, p, current, body.fields) for p in stored]
    summary = comparison.summarize(pages)
    return SelectorComparison(
        current_parser=current[0],
        current_version=current[1][1] if current[1] is not None else None,
        fields=[FieldSummaryPublic.model_validate(f) for f in summary],
        lost=[f.field for f in summary if f.lost],
        pages=[PageComparisonPublic.model_validate(p) for p in pages],
    )
