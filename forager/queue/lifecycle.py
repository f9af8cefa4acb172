"""Task statuses and which ones mean what (DESIGN.md "Task lifecycle")."""

from __future__ import annotations

from enum import StrEnum


class TaskStatus(StrEnum):
    PENDING = "pending"
    QUEUED = "queued"
    CRAWLING = "crawling"
    DOWNLOADED = "downloaded"
    QUEUED_PARSE = "queued_parse"
    PARSING = "parsing"
    COMPLETED = "completed"
    FAILED = "failed"
    PAUSED = "paused"
    CANCELLED = "cancelled"


S = TaskStatus

# Leased by a worker in the fetch phase: these count against a domain's concurrency.
FETCHING = (S.QUEUED, S.CRAWLING)
# Leased by a worker in the parse phase.
PARSE_LEASED = (S.QUEUED_PARSE, S.PARSING)
# Every status held under a lease.
LEASED = FETCHING + PARSE_LEASED
# Waiting for a worker.
WAITING = (S.PENDING, S.DOWNLOADED)
# Finished, one way or another.
TERMINAL = (S.COMPLETED, S.FAILED, S.CANCELLED)
