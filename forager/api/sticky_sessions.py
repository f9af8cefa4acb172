"""A domain's sticky sessions (issue 33): list them, retire one or all (admin; audited)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query

from forager.api.deps import MAX_ID, EntityId, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.pages import Page
from forager.api.sticky_session_schemas import DomainSessionPublic, SessionsRetired
from forager.db.types import utcnow
from forager.domains import session_admin

router = APIRouter(prefix="/api/domains", tags=["domains"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such domain."}}
_RETIRE_ONE: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such domain, or no such session of it."},
    409: {"description": "The session is retired already."},
}
SessionId = Annotated[int, Path(ge=1, le=MAX_ID, description="A session id.")]


@router.get("/{domain_id:int}/sessions", operation_id="list_domain_sessions", responses=_NOT_FOUND)
async def list_domain_sessions(
    domain_id: EntityId,
    session: ReadSessionDep,
    paging: PagingDep,
    state: Annotated[
        Literal["active", "retired"] | None, Query(description="Only sessions in this state.")
    ] = None,
) -> Page[DomainSessionPublic]:
    """The domain's sticky sessions, newest first: state, uses, age, proxy; never a cookie."""
    rows, total = await session_admin.list_page(
        session, domain_id, state, limit=paging.limit, offset=paging.offset
    )
    now = utcnow()
    return Page(
        items=[DomainSessionPublic(**session_admin.shown(r, now)) for r in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.post(
    "/{domain_id:int}/sessions/{session_id:int}/retire",
    operation_id="retire_domain_session",
    responses=_RETIRE_ONE,
)
async def retire_domain_session(
    domain_id: EntityId, session_id: SessionId, runtime: RuntimeDep
) -> DomainSessionPublic:
    """Retire one session now: its cookies are erased and the next fetch takes another."""
    row = await session_admin.retire_one(runtime.db, domain_id, session_id)
    return DomainSessionPublic(**session_admin.shown(row, utcnow()))


@router.post(
    "/{domain_id:int}/sessions/retire", operation_id="retire_domain_sessions", responses=_NOT_FOUND
)
async def retire_domain_sessions(domain_id: EntityId, runtime: RuntimeDep) -> SessionsRetired:
    """Retire every active session of the domain (e.g. after changing its request profile)."""
    return SessionsRetired(retired=await session_admin.retire_all(runtime.db, domain_id))
