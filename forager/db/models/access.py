"""Access tables: API keys (``forager.apikeys``) and logged-out dashboard sessions
(``forager.api.sessions``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base
from forager.db.types import BigId, UTCDateTime, utcnow


class ApiKey(Base):
    """An API key: only its SHA-256 is stored; ``key_prefix`` identifies it in lists."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), index=True)
    role: Mapped[str] = mapped_column(String(10))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_prefix: Mapped[str] = mapped_column(String(8))
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class DashboardLogout(Base):
    """A logged-out dashboard session (its nonce), refused until the session would expire."""

    __tablename__ = "dashboard_logouts"

    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
