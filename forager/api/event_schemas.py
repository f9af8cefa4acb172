"""The audit log's events as the API returns them (a task's detail and ``/api/events``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class EventPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    event: str
    details: dict[str, Any] | None
    actor: str | None = Field(
        None, description="The API key (its name) or cli behind the event; null for workers."
    )
    created_at: datetime


class AuditEvent(EventPublic):
    model_config = ConfigDict(from_attributes=True)

    entity_type: str
    entity_id: str
