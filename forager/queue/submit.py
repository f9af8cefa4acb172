"""Submitting URLs: normalize, find or create the domain, insert the task unless it exists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import audit
from forager.db.dialect import insert_ignoring_conflicts
from forager.db.engine import Database
from forager.db.models import CrawlTask, Domain
from forager.db.types import utcnow
from forager.errors import ForagerError, InvalidRequest
from forager.parse.registry import get_parser, parser_name_for_host
from forager.queue.adaptive import default_bounds, start
from forager.queue.announce import new_work
from forager.queue.lifecycle import TaskStatus
from forager.queue.urls import NormalizedURL, hash_url, normalize_url

_CHUNK = 500


@dataclass(frozen=True, slots=True)
class SubmitSpec:
    """What to crawl and how; ``None`` means the domain's or the settings' default."""

    url: str
    priority: int = 5
    is_recurring: bool = False
    crawl_frequency_seconds: int | None = None
    max_retries: int | None = None
    scheduled_at: datetime | None = None
    parser_name: str | None = None
    batch_name: str | None = None
    created_by: str = "api"
    # Adaptive recrawl (queue/adaptive.py): bounds default to a quarter and 7× the frequency.
    adaptive_recrawl: bool = False
    min_crawl_frequency_seconds: int | None = None
    max_crawl_frequency_seconds: int | None = None
    tags: tuple[str, ...] = ()  # written by forager.products.tags after the submit
    # A request beyond a bare GET, stored as given (forager.domains.profile.seal_request); its
    # "key" (method, body, the task's profile without secrets) is part of the task's identity.
    fetch_request: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SubmitOutcome:
    input_url: str
    result: Literal["created", "duplicate", "invalid"]
    task_id: int | None = None
    url: str | None = None
    status: str | None = None
    error: str | None = None
    url_hash: str | None = None


def _check(spec: SubmitSpec) -> NormalizedURL:
    if not 1 <= spec.priority <= 10:
        raise InvalidRequest(
            f"priority must be between 1 (highest) and 10 (lowest), not {spec.priority}",
            field="priority",
        )
    if spec.parser_name is not None:
        get_parser(spec.parser_name)
    if spec.max_retries is not None and not 0 <= spec.max_retries <= 100:
        raise InvalidRequest("max_retries must be between 0 and 100", field="max_retries")
    if spec.crawl_frequency_seconds is not None and spec.crawl_frequency_seconds < 60:
        raise InvalidRequest(
            "crawl_frequency_seconds must be at least 60", field="crawl_frequency_seconds"
        )
    normalized = normalize_url(spec.url)
    key = (spec.fetch_request or {}).get("key")
    if key is None:
        return normalized
    return replace(normalized, url_hash=hash_url(f"{normalized.url}\n{key}"))


def recrawl_columns(
    recurring: bool, adaptive: bool, base: int, low: int | None, high: int | None
) -> dict[str, Any]:
    """A task's recurrence columns. Nothing the schema allows is refused (as for monitors'
    bounds): an adaptive task is recurring whatever ``recurring`` says, bounds matter only
    for an adaptive task, and a maximum below the minimum is raised to it."""
    if not adaptive:
        return {
            "is_recurring": recurring,
            "adaptive_recrawl": False,
            "min_crawl_frequency_seconds": None,
            "max_crawl_frequency_seconds": None,
            "current_crawl_frequency_seconds": None,
            "unchanged_crawls": 0,
            "crawl_frequency_reason": None,
        }
    default_low, default_high = default_bounds(base)
    low = default_low if low is None else low
    high = max(low, default_high if high is None else high)
    current, reason = start(base, low, high)
    return {
        "is_recurring": True,
        "adaptive_recrawl": True,
        "min_crawl_frequency_seconds": low,
        "max_crawl_frequency_seconds": high,
        "current_crawl_frequency_seconds": current,
        "unchanged_crawls": 0,
        "crawl_frequency_reason": reason,
    }


async def domains_for(
    session: AsyncSession, settings: Settings, urls: Sequence[NormalizedURL]
) -> dict[str, Domain]:
    """The domains of ``urls`` by host, created with the settings' defaults when new."""
    hosts = {u.host: u for u in urls}
    if not hosts:
        return {}
    insert = insert_ignoring_conflicts(session, Domain.__table__, on=["domain_name"])
    now = utcnow()
    created = await session.execute(
        insert.returning(Domain.__table__.c.id),
        [
            {
                "domain_name": host,
                "base_url": u.base_url,
                "parser_name": parser_name_for_host(host),
                "crawl_delay_seconds": settings.default_crawl_delay_seconds,
                "max_concurrent_requests": settings.default_max_concurrent_requests,
                "default_crawl_frequency_seconds": settings.default_crawl_frequency_seconds,
                "is_active": True,
                "user_agent": settings.user_agent,
                "created_at": now,
                "updated_at": now,
            }
            for host, u in hosts.items()
        ],
    )
    audit.record(session, "domain", list(created.scalars()), "created")
    rows = await session.execute(select(Domain).where(Domain.domain_name.in_(list(hosts))))
    return {d.domain_name: d for d in rows.scalars()}


async def submit_urls(
    db: Database, settings: Settings, specs: Sequence[SubmitSpec]
) -> list[SubmitOutcome]:
    """Submit many URLs in one transaction; each gets an outcome, invalid ones say why."""
    checked: list[tuple[SubmitSpec, NormalizedURL | ForagerError]] = []
    for spec in specs:
        try:
            checked.append((spec, _check(spec)))
        except ForagerError as exc:
            checked.append((spec, exc))
    valid = [(spec, n) for spec, n in checked if isinstance(n, NormalizedURL)]
    by_hash: dict[str, tuple[int, str]] = {}
    created: set[str] = set()
    async with db.session() as session:
        domains = await domains_for(session, settings, [n for _, n in valid])
        for start in range(0, len(valid), _CHUNK):
            chunk = valid[start : start + _CHUNK]
            created |= await _insert_tasks(session, settings, domains, chunk)
            hashes = list({n.url_hash for _, n in chunk})
            rows = await session.execute(
                select(CrawlTask.id, CrawlTask.url_hash, CrawlTask.status).where(
                    CrawlTask.url_hash.in_(hashes)
                )
            )
            by_hash.update({r.url_hash: (r.id, r.status) for r in rows})
        new_ids = [by_hash[h][0] for h in created]
        audit.record(session, "task", new_ids, "created", {"to": TaskStatus.PENDING})
        if new_ids:
            await new_work(session)
    outcomes: list[SubmitOutcome] = []
    first_seen: set[str] = set()
    for spec, n in checked:
        if not isinstance(n, NormalizedURL):
            outcomes.append(SubmitOutcome(spec.url, "invalid", error=n.message))
            continue
        task_id, status = by_hash[n.url_hash]
        fresh = n.url_hash in created and n.url_hash not in first_seen
        first_seen.add(n.url_hash)
        outcomes.append(
            SubmitOutcome(
                spec.url,
                "created" if fresh else "duplicate",
                task_id,
                n.url,
                status=status,
                url_hash=n.url_hash,
            )
        )
    return outcomes


async def _insert_tasks(
    session: AsyncSession,
    settings: Settings,
    domains: dict[str, Domain],
    chunk: Sequence[tuple[SubmitSpec, NormalizedURL]],
) -> set[str]:
    now = utcnow()
    rows: dict[str, dict[str, object]] = {}
    for spec, n in chunk:
        domain = domains[n.host]
        base = spec.crawl_frequency_seconds or domain.default_crawl_frequency_seconds
        rows.setdefault(
            n.url_hash,
            {
                "domain_id": domain.id,
                "url": n.url,
                "url_hash": n.url_hash,
                "status": TaskStatus.PENDING,
                "priority": spec.priority,
                "scheduled_at": spec.scheduled_at or now,
                "max_retries": (
                    spec.max_retries if spec.max_retries is not None else settings.max_retries
                ),
                "crawl_frequency_seconds": base,
                **recrawl_columns(
                    spec.is_recurring,
                    spec.adaptive_recrawl,
                    base,
                    spec.min_crawl_frequency_seconds,
                    spec.max_crawl_frequency_seconds,
                ),
                "parser_name": spec.parser_name,
                "fetch_request": spec.fetch_request,
                "batch_name": spec.batch_name,
                "created_by": spec.created_by,
                "retry_count": 0,
                "recrawl_count": 0,
                "created_at": now,
                "updated_at": now,
            },
        )
    insert = insert_ignoring_conflicts(session, CrawlTask.__table__, on=["url_hash"])
    result = await session.execute(
        insert.returning(CrawlTask.__table__.c.url_hash), list(rows.values())
    )
    return set(result.scalars())
