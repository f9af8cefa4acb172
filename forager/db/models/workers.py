"""The worker registry's table (``forager.worker.presence``): worker processes as last seen."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    Integer,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base
from forager.db.types import UTCDateTime, utcnow


class Worker(Base):
    """A worker process as last seen: written on start and by every heartbeat."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))  # worker | serve | crawl
    concurrency: Mapped[int] = mapped_column(Integer)
    in_flight: Mapped[int] = mapped_column(Integer, default=0)
    processed: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Resources of the process tree at the last heartbeat (issue 15), and whether it stopped
    # to recycle itself (past FORAGER_WORKER_MEMORY_LIMIT_MB or _MAX_LIFETIME_HOURS).
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    cpu_percent: Mapped[float | None] = mapped_column(Float)
    recycled: Mapped[bool | None] = mapped_column(Boolean)
