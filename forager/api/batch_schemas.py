"""``/api/batches`` bodies: a batch with its progress, a move's body and what it did."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from forager.api.wire import JsonBody
from forager.queue.door import BatchProgress


class BatchPublic(BaseModel):
    """The tasks submitted under one batch name, and how far they are."""

    name: str
    state: Literal["running", "paused", "finished"] = Field(
        description="running: work waiting or in flight; paused: only paused work left; "
        "finished: every task completed, failed or cancelled."
    )
    by_status: dict[str, int] = Field(description="Tasks by status.")
    total: int
    done: int = Field(description="Completed, failed or cancelled.")
    paused: int
    remaining: int = Field(description="Neither done nor paused.")
    products: int = Field(description="Products read from the batch's pages.")
    failures: dict[str, int] = Field(description="Failed tasks by error type.")
    finished_recently: int = Field(description="Pages done in the last ten minutes.")
    pages_per_minute: float | None = Field(
        description="Pages done (completed or failed) per minute lately; null: none lately."
    )
    started_at: datetime = Field(description="When its first task was submitted.")
    last_activity_at: datetime = Field(description="The last change to one of its tasks.")
    estimated_end: datetime | None = Field(
        description="When the remaining tasks should be done at the recent pace; null when "
        "nothing remains or nothing finished lately."
    )

    @classmethod
    def of(cls, batch: BatchProgress) -> BatchPublic:
        return cls(
            name=batch.name,
            state=batch.state,
            by_status=batch.by_status,
            total=batch.total,
            done=batch.done,
            paused=batch.paused,
            remaining=batch.remaining,
            products=batch.products,
            failures=batch.failures,
            finished_recently=batch.finished_recently,
            pages_per_minute=batch.pages_per_minute,
            started_at=batch.started_at,
            last_activity_at=batch.last_activity_at,
            estimated_end=batch.estimated_end,
        )


class BatchRestart(JsonBody):
    """Which of the batch's finished tasks to crawl again."""

    model_config = ConfigDict(extra="forbid")

    only: Literal["failed", "all"] = Field(
        "failed",
        description="failed: the failed tasks; all: every completed, failed or cancelled one.",
    )


class BatchMovedPublic(BaseModel):
    """What a pause, resume, cancel or restart did, and the batch after it."""

    action: Literal["pause", "resume", "cancel", "restart_failed", "restart_all"]
    moved: int = Field(description="Tasks moved (those in another status were left as they are).")
    to: str = Field(description="The status they were moved to.")
    batch: BatchPublic
