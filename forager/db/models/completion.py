"""Completion webhooks (issue 35, seed 004's ``webhook_url``; owned by ``forager.alerts``, kept
in a module of its own): a task's or a batch's, each sent through the alerts outbox by a rule of
kind ``task_completed`` / ``batch_completed`` that holds the encrypted URL and secret."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base
from forager.db.types import BigId, UTCDateTime, utcnow


class CompletionHook(Base):
    """Post the products of ``task_id`` each time it completes, or those of ``batch_name``'s
    tasks once none of them is left to run (``fired_at`` then set)."""

    __tablename__ = "completion_hooks"
    __table_args__ = (
        CheckConstraint(
            "(task_id IS NULL) <> (batch_name IS NULL)", name="ck_completion_hooks_subject"
        ),
        Index("ix_completion_hooks_batch", "batch_name"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    rule_id: Mapped[int] = mapped_column(ForeignKey("alert_rules.id", ondelete="CASCADE"))
    task_id: Mapped[int | None] = mapped_column(
        ForeignKey("crawl_tasks.id", ondelete="CASCADE"), index=True
    )
    batch_name: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    fired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
