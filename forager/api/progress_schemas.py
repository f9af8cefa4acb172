"""``/api/progress`` bodies: how far the queue or a batch is, when it should end, and why each
domain's tasks wait (issue 34)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from forager.politeness.waits import Reason


class DomainWait(BaseModel):
    """What limits one domain's rate now, with its figure."""

    domain_id: int
    domain: str
    pending: int = Field(description="Pending tasks (of the batch, when one is asked for).")
    due: int = Field(description="Of those, the ones whose time has come.")
    in_flight: int = Field(description="The domain's requests being fetched now (every task).")
    reason: Reason = Field(description="The limit in force now (the first that holds).")
    message: str = Field(
        examples=["crawl delay 1 s per domain → at most 1 page/s; 180 pending"],
        description="The limit and its figure, in words.",
    )
    max_pages_per_second: float | None = Field(
        description="The cap this limit puts on the domain (0 while it stops it; null: none)."
    )


class Progress(BaseModel):
    """The whole queue's progress, or one batch's (``batch_name``)."""

    batch_name: str | None
    by_status: dict[str, int]
    total: int
    done: int = Field(description="Completed, failed or cancelled.")
    paused: int = Field(description="Paused: neither done nor on their way.")
    remaining: int = Field(description="Neither done nor paused.")
    finished_recently: int = Field(
        description="Tasks done in the last ten minutes (the rate's sample)."
    )
    rate_per_minute: float | None = Field(
        description="Tasks done per minute lately; null when none finished lately."
    )
    estimated_end: datetime | None = Field(
        description="When the remaining tasks should be done at the recent rate; null when "
        "nothing remains or nothing finished lately."
    )
    domains: list[DomainWait] = Field(
        description="The domains with pending or in-flight tasks, most pending first (50 at "
        "the most): why each waits."
    )
