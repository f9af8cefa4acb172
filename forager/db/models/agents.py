"""The agents package's table (``forager.agents``): home-network agents."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Integer,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base, Timestamped
from forager.db.types import BigId, UTCDateTime


class Agent(Timestamped, Base):
    """A home-network agent (seed 000 ``LocalWorker``): dials in over WebSocket, only fetches."""

    __tablename__ = "agents"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # SHA-256 of the token (DESIGN.md decision 6); the token itself is shown once, never stored.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    token_prefix: Mapped[str] = mapped_column(String(12))
    isp_name: Mapped[str | None] = mapped_column(String(100))
    external_ip: Mapped[str | None] = mapped_column(String(45))
    status: Mapped[str] = mapped_column(String(20), default="disconnected", index=True)
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    tasks_completed_count: Mapped[int] = mapped_column(Integer, default=0)
    tasks_failed_count: Mapped[int] = mapped_column(Integer, default=0)
    agent_version: Mapped[str | None] = mapped_column(String(50))
    blocked_reason: Mapped[str | None] = mapped_column(String(500))
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
