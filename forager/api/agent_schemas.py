"""Request and response bodies of the agents API (Create / Public / Created-with-token)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from forager.api.wire import JsonBody, Shape

AgentName = Annotated[
    str,
    Shape(
        r"^[A-Za-z0-9](?:[A-Za-z0-9 -]{0,98}[A-Za-z0-9])?(?![\s\S])",
        "1–100 letters, digits, spaces or hyphens, starting and ending with a letter or digit",
        100,
    ),
]
AgentStatusName = Literal["disconnected", "connected", "busy", "blocked"]


class AgentCreate(JsonBody):
    model_config = ConfigDict(extra="forbid")

    name: AgentName = Field(
        description="1–100 letters, digits, spaces or hyphens (seed 000).",
        examples=["home-sao-paulo-1"],
    )


class AgentPublic(BaseModel):
    """An agent as stored; never its token (only the first characters, to recognise it)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    token_prefix: str = Field(description="First characters of the current token.")
    status: AgentStatusName
    isp_name: str | None
    external_ip: str | None
    last_heartbeat_at: datetime | None
    tasks_completed_count: int
    tasks_failed_count: int
    agent_version: str | None
    blocked_reason: str | None = Field(description="What the site showed when it was blocked.")
    revoked_at: datetime | None
    created_at: datetime
    updated_at: datetime


class AgentWithToken(AgentPublic):
    """Returned once, when the agent is created or its token rotated: store the token now."""

    token: str = Field(description="The agent's token. It is not stored and is shown only now.")
