"""Domains: create, list, inspect, update, delete, (de)activate, refresh robots.txt, stats."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel

from forager.api.deps import EntityId, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.domain_schemas import (
    AttemptStats,
    DomainCreate,
    DomainDetail,
    DomainPublic,
    DomainStats,
    DomainUpdate,
    RobotsRefreshed,
)
from forager.api.pages import Page
from forager.db.models import Domain
from forager.domains import admin

router = APIRouter(prefix="/api/domains", tags=["domains"])

M = TypeVar("M", bound=BaseModel)

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such domain."}}
_DELETE_REFUSED: dict[int | str, dict[str, Any]] = {
    **_NOT_FOUND,
    409: {"description": "Some of the domain's tasks are in flight (leased by a worker)."},
}


def _shape(domain: Domain, counts: dict[str, int], model: type[M], **extra: Any) -> M:
    fields = [n for n in model.model_fields if n not in ("task_counts", *extra)]
    return model(**{n: getattr(domain, n) for n in fields}, task_counts=counts, **extra)


async def _detail(runtime: RuntimeDep, domain: Domain) -> DomainDetail:
    async with runtime.db.reader() as session:
        counts = await admin.task_counts(session, [domain.id])
    return _shape(domain, counts[domain.id], DomainDetail)


@router.post(
    "",
    operation_id="create_domain",
    status_code=201,
    responses={409: {"description": "A domain with this name exists."}},
)
async def create_domain(body: DomainCreate, runtime: RuntimeDep) -> DomainDetail:
    """Register a site; settings not given get the server defaults (409 if it exists)."""
    values = body.model_dump(exclude_unset=True, exclude={"domain_name"})
    domain = await admin.create(runtime.db, runtime.settings, body.domain_name, values, runtime.box)
    return await _detail(runtime, domain)


@router.get("", operation_id="list_domains")
async def list_domains(
    session: ReadSessionDep,
    paging: PagingDep,
    is_active: Annotated[bool | None, Query(description="Only active (or inactive) ones.")] = None,
    parser_name: Annotated[str | None, Query(max_length=100)] = None,
    q: Annotated[str | None, Query(max_length=255, description="Part of the domain name.")] = None,
) -> Page[DomainPublic]:
    """Domains by name, each with its task counts, and the total for pagination."""
    filters = admin.Filters(is_active=is_active, parser_name=parser_name, q=q)
    domains, total = await admin.list_page(
        session, filters, limit=paging.limit, offset=paging.offset
    )
    counts = await admin.task_counts(session, [d.id for d in domains])
    return Page(
        items=[_shape(d, counts[d.id], DomainPublic) for d in domains],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.get("/{domain_id:int}", operation_id="get_domain", responses=_NOT_FOUND)
async def get_domain(domain_id: EntityId, session: ReadSessionDep) -> DomainDetail:
    """One domain with its robots.txt and task counts."""
    domain = await admin.get(session, domain_id)
    counts = await admin.task_counts(session, [domain_id])
    return _shape(domain, counts[domain_id], DomainDetail)


@router.patch("/{domain_id:int}", operation_id="update_domain", responses=_NOT_FOUND)
async def update_domain(
    domain_id: EntityId, body: DomainUpdate, runtime: RuntimeDep
) -> DomainDetail:
    """Change some of a domain's settings (the name cannot change)."""
    values = body.model_dump(exclude_unset=True)
    domain = await admin.update(runtime.db, domain_id, values, runtime.box)
    runtime.wake()
    return await _detail(runtime, domain)


@router.delete(
    "/{domain_id:int}", operation_id="delete_domain", status_code=204, responses=_DELETE_REFUSED
)
async def delete_domain(domain_id: EntityId, runtime: RuntimeDep) -> Response:
    """Delete a domain with its tasks, attempts and products; refused while tasks are in flight."""
    await admin.remove(runtime.db, domain_id)
    return Response(status_code=204)


@router.post("/{domain_id:int}/activate", operation_id="activate_domain", responses=_NOT_FOUND)
async def activate_domain(domain_id: EntityId, runtime: RuntimeDep) -> DomainDetail:
    """Let workers claim this domain's tasks again."""
    domain = await admin.set_active(runtime.db, domain_id, True)
    runtime.wake()
    return await _detail(runtime, domain)


@router.post("/{domain_id:int}/deactivate", operation_id="deactivate_domain", responses=_NOT_FOUND)
async def deactivate_domain(domain_id: EntityId, runtime: RuntimeDep) -> DomainDetail:
    """Stop claiming this domain's tasks (tasks in flight finish)."""
    domain = await admin.set_active(runtime.db, domain_id, False)
    return await _detail(runtime, domain)


@router.post(
    "/{domain_id:int}/refresh-robots", operation_id="refresh_domain_robots", responses=_NOT_FOUND
)
async def refresh_domain_robots(domain_id: EntityId, runtime: RuntimeDep) -> RobotsRefreshed:
    """Fetch ``<base_url>/robots.txt`` now; its ``Crawl-delay`` can raise the domain's delay.

    A failed fetch is not an error of this request: ``robots_error`` says what went wrong
    and the stored robots.txt is kept.
    """
    domain, error = await admin.refresh_robots(
        runtime.db, runtime.settings, domain_id, fetcher=runtime.fetchers, box=runtime.box
    )
    async with runtime.db.reader() as session:
        counts = await admin.task_counts(session, [domain_id])
    return _shape(domain, counts[domain_id], RobotsRefreshed, robots_error=error)


@router.get("/{domain_id:int}/stats", operation_id="get_domain_stats", responses=_NOT_FOUND)
async def get_domain_stats(domain_id: EntityId, session: ReadSessionDep) -> DomainStats:
    """Tasks by status, the last 24 hours of attempts, products and the last completion."""
    stats = await admin.stats(session, domain_id)
    by_outcome = stats.attempts_by_outcome
    return DomainStats(
        domain_id=domain_id,
        tasks_by_status=stats.tasks_by_status,
        total_tasks=sum(stats.tasks_by_status.values()),
        attempts_last_24h=AttemptStats(
            total=sum(by_outcome.values()),
            by_outcome=by_outcome,
            by_error_type=stats.attempts_by_error_type,
            avg_fetch_response_time_ms=stats.avg_fetch_response_time_ms,
        ),
        products=stats.products,
        last_completed_at=stats.last_completed_at,
    )
