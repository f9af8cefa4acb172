"""Agents: register home-network agents, list them, revoke, rotate tokens, reset after a block.

Also the agents' own door: the WebSocket at ``/agents/ws`` (docs/AGENT_PROTOCOL.md), which
authenticates with the agent token, not an API key.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, WebSocket

from forager.agents import admin
from forager.api.agent_schemas import AgentCreate, AgentPublic, AgentStatusName, AgentWithToken
from forager.api.deps import EntityId, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.pages import Page

router = APIRouter(prefix="/api/agents", tags=["agents"])
ws_router = APIRouter(tags=["agents"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such agent."}}


def _with_token(agent: Any, token: str) -> AgentWithToken:
    return AgentWithToken(**AgentPublic.model_validate(agent).model_dump(), token=token)


@router.post(
    "",
    operation_id="create_agent",
    status_code=201,
    responses={409: {"description": "An agent with this name exists."}},
)
async def create_agent(body: AgentCreate, runtime: RuntimeDep) -> AgentWithToken:
    """Register an agent; the response carries its token, shown this once only."""
    agent, token = await admin.create_agent(runtime.db, body.name)
    return _with_token(agent, token)


@router.get("", operation_id="list_agents")
async def list_agents(
    session: ReadSessionDep,
    paging: PagingDep,
    status: Annotated[
        AgentStatusName | None, Query(description="Only agents in this status.")
    ] = None,
) -> Page[AgentPublic]:
    """Agents by id, with their status, last heartbeat and task counts."""
    rows, total = await admin.list_agents(
        session, status=status, limit=paging.limit, offset=paging.offset
    )
    return Page(
        items=[AgentPublic.model_validate(a) for a in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.get("/{agent_id:int}", operation_id="get_agent", responses=_NOT_FOUND)
async def get_agent(agent_id: EntityId, session: ReadSessionDep) -> AgentPublic:
    """One agent."""
    return AgentPublic.model_validate(await admin.get_agent(session, agent_id))


@router.post(
    "/{agent_id:int}/revoke",
    operation_id="revoke_agent",
    responses={**_NOT_FOUND, 409: {"description": "The agent is already revoked."}},
)
async def revoke_agent(agent_id: EntityId, runtime: RuntimeDep) -> AgentPublic:
    """Refuse the agent's token from now on and close its live connection."""
    agent = await admin.revoke_agent(runtime.db, agent_id)
    if runtime.hub is not None:
        await runtime.hub.kick(agent_id, "authentication failed")
    return AgentPublic.model_validate(agent)


@router.post(
    "/{agent_id:int}/rotate-token",
    operation_id="rotate_agent_token",
    responses={**_NOT_FOUND, 409: {"description": "The agent is revoked."}},
)
async def rotate_agent_token(agent_id: EntityId, runtime: RuntimeDep) -> AgentWithToken:
    """Give the agent a new token (shown once); the old one is refused from now on."""
    agent, token = await admin.rotate_token(runtime.db, agent_id)
    if runtime.hub is not None:
        await runtime.hub.kick(agent_id, "authentication failed")
    return _with_token(agent, token)


@router.post(
    "/{agent_id:int}/reset",
    operation_id="reset_agent",
    responses={**_NOT_FOUND, 409: {"description": "The agent is not blocked."}},
)
async def reset_agent(agent_id: EntityId, runtime: RuntimeDep) -> AgentPublic:
    """Manual reset after a block (seed: ``blocked → connected``): it gets tasks again."""
    agent = await admin.reset_agent(runtime.db, agent_id)
    if runtime.hub is not None:
        await runtime.hub.status_changed(agent_id, agent.status)
    return AgentPublic.model_validate(agent)


@ws_router.websocket("/agents/ws")
async def agent_socket(websocket: WebSocket) -> None:
    """Home-network agents connect here (docs/AGENT_PROTOCOL.md)."""
    runtime = websocket.app.state.runtime
    if runtime.hub is None:
        await websocket.close(code=1013, reason="agents are not served here")
        return
    await runtime.hub.serve(websocket)
