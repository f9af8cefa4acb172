"""Proxies and domain ↔ proxy mappings: the pool, its health, and which domain uses what."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import ValidationError
from sqlalchemy import select

from forager.api.auth import ApiKeyDep
from forager.api.deps import EntityId, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.pages import Page
from forager.api.proxy_schemas import (
    AlertPublic,
    AssignmentPublic,
    DomainHealthPublic,
    DomainProxyPublic,
    MappingAssign,
    ProxyBulkCreate,
    ProxyBulkCreated,
    ProxyBulkResult,
    ProxyCreate,
    ProxyHealthPublic,
    ProxyPublic,
    ProxyStatsPublic,
    ProxyTestRequest,
    ProxyTestResult,
    ProxyUpdate,
)
from forager.api.wire import message_of
from forager.db.models import Proxy
from forager.db.queries import page
from forager.proxies import admin, health
from forager.proxies import mappings as proxy_mappings

router = APIRouter(prefix="/api/proxies", tags=["proxies"])
mappings = APIRouter(prefix="/api/domains/{domain_id:int}/proxies", tags=["proxies"])

_NO_PROXY: dict[int | str, dict[str, Any]] = {404: {"description": "No such proxy."}}
_NO_MAPPING: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such domain, or the proxy is not mapped to it."}
}


def _reason(exc: ValueError) -> str:
    """A validation failure without the input (which may hold a password)."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'line'}: {message_of(e)}" for e in exc.errors()
        )
    return str(exc)


@router.post(
    "",
    operation_id="create_proxy",
    status_code=201,
    responses={409: {"description": "A proxy with this host, port and username exists."}},
)
async def create_proxy(body: ProxyCreate, runtime: RuntimeDep, key: ApiKeyDep) -> ProxyPublic:
    """Add one proxy; its password is encrypted at rest and never returned."""
    box = runtime.box
    proxy = await admin.create_proxy(runtime.db, box, body.columns())
    return ProxyPublic.of(proxy, role=key.role)


@router.post("/bulk", operation_id="create_proxies")
async def create_proxies(body: ProxyBulkCreate, runtime: RuntimeDep) -> ProxyBulkCreated:
    """Add many proxies; each line or item gets its own result (created, duplicate, invalid)."""
    inputs: list[str] = []
    items: list[ProxyCreate | str] = []  # a valid proxy, or why it is not
    for line in (body.lines or "").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        inputs.append(admin.masked_line(line))
        try:
            items.append(ProxyCreate.model_validate(admin.parse_proxy_line(line)))
        except ValueError as exc:
            items.append(_reason(exc))
    inputs.extend(f"proxies[{n}]" for n in range(len(body.proxies)))
    items.extend(body.proxies)
    for n, item in enumerate(items):
        if isinstance(item, ProxyCreate):
            items[n] = await admin.refusal(item.columns()["proxy_url"]) or item
    valid = [item.columns() for item in items if isinstance(item, ProxyCreate)]
    outcomes = iter(await admin.create_proxies(runtime.db, runtime.box, valid))
    results = []
    for shown, item in zip(inputs, items, strict=True):
        if isinstance(item, str):
            results.append(ProxyBulkResult(input=shown, result="invalid", error=item))
        else:
            result, proxy_id = next(outcomes)
            results.append(ProxyBulkResult(input=shown, result=result, proxy_id=proxy_id))
    count = {kind: sum(r.result == kind for r in results) for kind in ("created", "duplicate")}
    return ProxyBulkCreated(
        created=count["created"],
        duplicate=count["duplicate"],
        invalid=len(results) - count["created"] - count["duplicate"],
        results=results,
    )


@router.get("", operation_id="list_proxies")
async def list_proxies(
    session: ReadSessionDep,
    key: ApiKeyDep,
    paging: PagingDep,
    is_active: Annotated[bool | None, Query(description="Only enabled or disabled ones.")] = None,
    country_code: Annotated[str | None, Query(min_length=2, max_length=2)] = None,
    provider: Annotated[str | None, Query(max_length=100)] = None,
) -> Page[ProxyPublic]:
    """Proxies, oldest first, with the total count for pagination."""
    query = select(Proxy)
    if is_active is not None:
        query = query.where(Proxy.is_active.is_(is_active))
    if country_code is not None:
        query = query.where(Proxy.country_code == country_code.upper())
    if provider is not None:
        query = query.where(Proxy.provider == provider)
    rows, total = await page(session, query, Proxy.id, limit=paging.limit, offset=paging.offset)
    return Page(
        items=[ProxyPublic.of(p, role=key.role) for p in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.get("/stats", operation_id="proxy_stats")
async def proxy_stats(session: ReadSessionDep) -> ProxyStatsPublic:
    """Pool totals (active, disabled), counts by country and provider, mean response time."""
    return ProxyStatsPublic.model_validate(await admin.proxy_stats(session))


@router.get("/health", operation_id="proxy_health")
async def proxy_health(session: ReadSessionDep, runtime: RuntimeDep) -> ProxyHealthPublic:
    """Each domain's proxy pool health, and alerts: too few active proxies, too many failures."""
    domains, alerts = await health.proxy_health(session, runtime.settings)
    return ProxyHealthPublic(
        domains=[DomainHealthPublic.model_validate(d) for d in domains],
        alerts=[AlertPublic.model_validate(a) for a in alerts],
    )


@router.get("/{proxy_id:int}", operation_id="get_proxy", responses=_NO_PROXY)
async def get_proxy(proxy_id: EntityId, session: ReadSessionDep, key: ApiKeyDep) -> ProxyPublic:
    """One proxy (the password only as ``password_set``, the username to admin keys only)."""
    return ProxyPublic.of(await admin.get_proxy(session, proxy_id), role=key.role)


@router.patch(
    "/{proxy_id:int}",
    operation_id="update_proxy",
    responses={**_NO_PROXY, 409: {"description": "Another proxy has that host+port+username."}},
)
async def update_proxy(
    proxy_id: EntityId, body: ProxyUpdate, runtime: RuntimeDep, key: ApiKeyDep
) -> ProxyPublic:
    """Change fields; a new password is encrypted, an empty or null one clears it."""
    proxy = await admin.update_proxy(runtime.db, runtime.box, proxy_id, body.changes())
    return ProxyPublic.of(proxy, role=key.role)


@router.delete("/{proxy_id:int}", operation_id="delete_proxy", status_code=204, responses=_NO_PROXY)
async def delete_proxy(proxy_id: EntityId, runtime: RuntimeDep) -> Response:
    """Delete a proxy and its domain mappings; tasks and attempts keep no reference to it."""
    await admin.delete_proxy(runtime.db, proxy_id)
    return Response(status_code=204)


@router.post("/{proxy_id:int}/enable", operation_id="enable_proxy", responses=_NO_PROXY)
async def enable_proxy(proxy_id: EntityId, runtime: RuntimeDep, key: ApiKeyDep) -> ProxyPublic:
    """Put a proxy back in rotation with its failure count reset."""
    proxy = await admin.set_proxy_active(runtime.db, proxy_id, active=True)
    return ProxyPublic.of(proxy, role=key.role)


@router.post("/{proxy_id:int}/disable", operation_id="disable_proxy", responses=_NO_PROXY)
async def disable_proxy(proxy_id: EntityId, runtime: RuntimeDep, key: ApiKeyDep) -> ProxyPublic:
    """Take a proxy out of rotation for every domain; no background re-test brings it back."""
    proxy = await admin.set_proxy_active(runtime.db, proxy_id, active=False)
    return ProxyPublic.of(proxy, role=key.role)


@router.post("/{proxy_id:int}/test", operation_id="test_proxy", responses=_NO_PROXY)
async def test_proxy(
    proxy_id: EntityId, body: ProxyTestRequest, runtime: RuntimeDep
) -> ProxyTestResult:
    """Fetch a URL through the proxy now; the outcome counts in the proxy's health."""
    box = runtime.box
    probe = await admin.probe_proxy(
        runtime.db, runtime.settings, box, runtime.fetchers, proxy_id, body.url
    )
    return ProxyTestResult.model_validate(probe)


@mappings.post("", operation_id="assign_proxies", responses={404: {"description": "No domain."}})
async def assign_proxies(
    domain_id: EntityId, body: MappingAssign, runtime: RuntimeDep
) -> AssignmentPublic:
    """Let a domain use these proxies; known pairs and unknown ids are reported, not errors."""
    done = await proxy_mappings.assign_proxies(runtime.db, domain_id, body.proxy_ids, body.priority)
    return AssignmentPublic.model_validate(done)


@mappings.get(
    "", operation_id="list_domain_proxies", responses={404: {"description": "No domain."}}
)
async def list_domain_proxies(
    domain_id: EntityId, session: ReadSessionDep
) -> list[DomainProxyPublic]:
    """A domain's proxies with their success rate for it, by priority then least recently used."""
    views = await proxy_mappings.domain_proxies(session, domain_id)
    return [DomainProxyPublic.model_validate(v) for v in views]


@mappings.delete(
    "/{proxy_id:int}", operation_id="remove_proxy_mapping", status_code=204, responses=_NO_MAPPING
)
async def remove_proxy_mapping(
    domain_id: EntityId, proxy_id: EntityId, runtime: RuntimeDep
) -> Response:
    """Stop using a proxy for this domain (the proxy itself stays)."""
    await proxy_mappings.remove_mapping(runtime.db, domain_id, proxy_id)
    return Response(status_code=204)


@mappings.post("/{proxy_id:int}/enable", operation_id="enable_proxy_mapping", responses=_NO_MAPPING)
async def enable_proxy_mapping(
    domain_id: EntityId, proxy_id: EntityId, runtime: RuntimeDep
) -> DomainProxyPublic:
    """Use the proxy for this domain again, its failure count for the domain reset."""
    view = await proxy_mappings.set_mapping_active(runtime.db, domain_id, proxy_id, active=True)
    return DomainProxyPublic.model_validate(view)


@mappings.post(
    "/{proxy_id:int}/disable", operation_id="disable_proxy_mapping", responses=_NO_MAPPING
)
async def disable_proxy_mapping(
    domain_id: EntityId, proxy_id: EntityId, runtime: RuntimeDep
) -> DomainProxyPublic:
    """Stop choosing the proxy for this domain, keeping the mapping and its counters."""
    view = await proxy_mappings.set_mapping_active(runtime.db, domain_id, proxy_id, active=False)
    return DomainProxyPublic.model_validate(view)
