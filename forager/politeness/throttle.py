"""Adaptive throttling shared through the database (like Scrapy's AutoThrottle, across processes).

A domain's effective delay is ``max(crawl_delay_seconds, throttle_delay_seconds)``; the claim
and the politeness gate use it. ``throttle_delay_seconds`` rises when the site pushes back
(429 / 503: doubled, at least one second and at least ``Retry-After``) or answers slowly
(responses slower than ``FORAGER_THROTTLE_SLOW_SECONDS`` raise it to response time /
``FORAGER_THROTTLE_TARGET_CONCURRENCY``), and each healthy response halves its distance to
the configured delay; once within 10 ms it is cleared. ``Retry-After`` also holds the domain's gate
closed until then, so no worker of any process asks earlier.
"""

from __future__ import annotations

from datetime import timedelta
from email.utils import parsedate_to_datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db.models import Domain
from forager.db.types import utcnow

# The statuses a site pushes back with: they raise its delay (and carry ``Retry-After``).
OVERLOAD_STATUSES = frozenset({429, 503})
_SETTLED = 0.01  # seconds above the configured delay below which throttling is cleared
_OVERLOAD_FLOOR = 1.0
_RETRY_AFTER_CAP = 86400.0  # a site asking for more than a day is taken at a day


def effective_delay(crawl_delay: float, throttle_delay: float | None) -> float:
    """The delay the claim and the gate use for a domain."""
    return max(crawl_delay, throttle_delay or 0.0)


def retry_after_seconds(headers: dict[str, str]) -> float | None:
    """``Retry-After`` in seconds (delta or HTTP date), at most a day; None if absent or bad."""
    value = headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return min(float(value), _RETRY_AFTER_CAP)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, min((when - utcnow()).total_seconds(), _RETRY_AFTER_CAP))


async def _locked(session: AsyncSession, domain_id: int) -> Domain | None:
    return await session.scalar(
        select(Domain)
        .where(Domain.id == domain_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


async def on_overload(
    session: AsyncSession, domain_id: int, settings: Settings, retry_after: float | None
) -> float:
    """The site said 429/503: raise the domain's delay, honour ``Retry-After``; the new delay."""
    domain = await _locked(session, domain_id)
    if domain is None:
        return 0.0
    current = effective_delay(domain.crawl_delay_seconds, domain.throttle_delay_seconds)
    raised = max(current * 2, _OVERLOAD_FLOOR, retry_after or 0.0)
    new = max(domain.crawl_delay_seconds, min(raised, settings.throttle_max_delay_seconds))
    values: dict[str, object] = {"throttle_delay_seconds": new}
    if retry_after:
        until = utcnow() + timedelta(seconds=retry_after)
        if domain.next_fetch_at is None or domain.next_fetch_at < until:
            values["next_fetch_at"] = until
    await session.execute(
        update(Domain)
        .where(Domain.id == domain_id)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return new


async def on_response(
    session: AsyncSession, domain_id: int, settings: Settings, response_ms: int
) -> None:
    """A healthy answer: a slow one raises the delay, a quick one lets it decay."""
    seconds = response_ms / 1000.0
    row = (
        await session.execute(
            select(Domain.crawl_delay_seconds, Domain.throttle_delay_seconds).where(
                Domain.id == domain_id
            )
        )
    ).one_or_none()
    if row is None or (
        row.throttle_delay_seconds is None and seconds < settings.throttle_slow_seconds
    ):
        return  # the common case: nothing to adjust, nothing written
    floor = row.crawl_delay_seconds
    current = effective_delay(floor, row.throttle_delay_seconds)
    target = seconds / settings.throttle_target_concurrency
    if seconds >= settings.throttle_slow_seconds and target > current:  # slow: back off
        new: float | None = min(target, settings.throttle_max_delay_seconds)
    else:
        new = floor + (current - floor) / 2
    if new is not None and new - floor < _SETTLED:
        new = None
    if new != row.throttle_delay_seconds:
        await session.execute(
            update(Domain)
            .where(Domain.id == domain_id)
            .values(throttle_delay_seconds=new)
            .execution_options(synchronize_session=False)
        )
