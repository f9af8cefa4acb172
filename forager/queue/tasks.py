"""A leased task as its worker holds it: the task's columns plus what its domain says, read once
per claim so the fetch needs no further read of the domain."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from forager.queue.adaptive import Adaptive


@dataclass(frozen=True, slots=True)
class ClaimedTask:
    """A task leased to one worker, with what the worker needs to process it."""

    id: int
    url: str
    url_hash: str
    status: str
    domain_id: int
    domain_name: str
    parser_name: str
    user_agent: str
    crawl_delay_seconds: float
    retry_count: int
    max_retries: int
    html_path: str | None
    is_recurring: bool
    crawl_frequency_seconds: int
    # The domain's fetch settings at claim time (one read per claimed domain, not per task).
    fetcher: str = "http"
    # With fetcher "auto": the fetcher auto last remembered for the domain (None: http). An
    # agent fetches an auto domain's task with it (agents do not climb).
    rung: str | None = None
    wait_for_selector: str | None = None
    # False when the domain has no mapped proxy, no global pool and no country: go direct
    # without asking the proxy tables (most domains; DESIGN.md "Fetch policy").
    uses_proxies: bool = True
    ignore_robots: bool = False
    # The version of the domain's robots.txt at claim time: a check against a parsed copy of
    # that version needs no read of the domain (None: never fetched, or not known).
    robots_fetched_at: datetime | None = None
    # The domain's selector map (domain id, version, fields) when the task's parser is
    # "selector" and the domain has one in use.
    selector: tuple[int, int, dict[str, Any]] | None = None
    # A recurring task with an adaptive frequency (crawl_frequency_seconds is then its current
    # one); None for every other task.
    adaptive: Adaptive | None = None
    # A crawl job's task (issue 32): its job, depth and what its page is for (follow | parse).
    job_id: int | None = None
    depth: int | None = None
    job_action: str | None = None
    # The domain's request profile as stored (secret values sealed; forager.domains.profile
    # opens it just before the fetch).
    domain_profile: dict[str, Any] | None = None
    # The task's own request as stored (method, body, its profile; None: a bare GET).
    fetch_request: dict[str, Any] | None = None
    # The domain's sticky-session policy (issue 33; None: no sessions).
    sticky_sessions: dict[str, Any] | None = None
    # The crawl job's request profile as stored (secret values sealed; None: none, or no job).
    job_profile: dict[str, Any] | None = None
