"""Circuit breakers for domains and proxies, kept in the database so every process agrees.

Seed 002 semantics: CLOSED counts consecutive failures and opens at
``breaker_failure_threshold``; OPEN refuses work for ``breaker_open_seconds``, then is
HALF_OPEN (no write needed: an open breaker whose time is up *is* half-open); in HALF_OPEN
``breaker_success_threshold`` successes close it and any failure opens it again.

Each outcome is one ``UPDATE`` built from ``CASE`` expressions, so two processes recording
outcomes at once never lose a count or flip the state twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import String, and_, case, cast, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db.models import Domain, Proxy
from forager.db.types import utcnow

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
STATES = (CLOSED, OPEN, HALF_OPEN)


def _reopen_cutoff(settings: Settings, now: datetime) -> datetime:
    return now - timedelta(seconds=settings.breaker_open_seconds)


def allows(model: Any, settings: Settings, now: datetime) -> Any:
    """SQL condition: the breaker of ``model`` (Domain or Proxy) lets work through now."""
    return or_(
        model.breaker_state != OPEN,
        model.breaker_opened_at.is_(None),
        model.breaker_opened_at <= _reopen_cutoff(settings, now),
    )


def effective_state(
    state: str, opened_at: datetime | None, settings: Settings, now: datetime
) -> str:
    """The state as callers see it: an open breaker whose time is up is half-open."""
    if state == OPEN and (opened_at is None or opened_at <= _reopen_cutoff(settings, now)):
        return HALF_OPEN
    return state


def outcome_values(model: Any, settings: Settings, now: datetime, *, ok: bool) -> dict[str, Any]:
    """Column values recording one success or failure on ``model``'s breaker."""
    state = model.breaker_state
    half_open = or_(
        state == HALF_OPEN,
        and_(state == OPEN, model.breaker_opened_at <= _reopen_cutoff(settings, now)),
    )
    if ok:
        closes = and_(half_open, model.breaker_successes + 1 >= settings.breaker_success_threshold)
        return {
            "breaker_state": case((closes, CLOSED), (half_open, HALF_OPEN), else_=state),
            "breaker_successes": case(
                (closes, 0), (half_open, model.breaker_successes + 1), else_=0
            ),
            "breaker_failures": case((state == OPEN, model.breaker_failures), else_=0),
        }
    opens = or_(
        half_open,
        and_(state == CLOSED, model.breaker_failures + 1 >= settings.breaker_failure_threshold),
    )
    return {
        "breaker_state": case((opens, OPEN), else_=state),
        "breaker_opened_at": case((opens, now), else_=model.breaker_opened_at),
        "breaker_failures": model.breaker_failures + 1,
        "breaker_successes": 0,
    }


@dataclass(frozen=True, slots=True)
class BreakerView:
    """One breaker that is not closed, as /health and /metrics show it."""

    kind: str  # domain | proxy
    entity_id: int
    name: str
    state: str  # open | half_open (effective: an open breaker whose time is up is half-open)
    failure_count: int
    success_count: int
    opened_at: datetime | None


async def not_closed(session: AsyncSession, settings: Settings) -> list[BreakerView]:
    """Every domain and proxy breaker that is open or half-open (closed ones are the norm)."""
    now = utcnow()
    views: list[BreakerView] = []
    for kind, model, name in (
        ("domain", Domain, Domain.domain_name),
        ("proxy", Proxy, Proxy.proxy_url + ":" + cast(Proxy.proxy_port, String)),
    ):
        rows = await session.execute(
            select(
                model.id,
                name,
                model.breaker_state,
                model.breaker_failures,
                model.breaker_successes,
                model.breaker_opened_at,
            )
            .where(model.breaker_state != CLOSED)
            .order_by(model.id)
        )
        views += [
            BreakerView(
                kind, r[0], r[1], effective_state(r[2], r[5], settings, now), r[3], r[4], r[5]
            )
            for r in rows
        ]
    return views
