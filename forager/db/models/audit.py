"""The audit log's table (``events``), written by ``forager.db.audit``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Index,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base
from forager.db.types import BigId, JsonDoc, UTCDateTime, utcnow


class Event(Base):
    """The audit log: one row per state change of any entity (DESIGN.md decision 5)."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_entity", "entity_type", "entity_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    entity_type: Mapped[str] = mapped_column(String(30))
    entity_id: Mapped[str] = mapped_column(String(64))
    event: Mapped[str] = mapped_column(String(50), index=True)
    details: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    # The API key's name, or "cli", behind the event; NULL for workers (migration 0010).
    actor: Mapped[str | None] = mapped_column(String(100))
