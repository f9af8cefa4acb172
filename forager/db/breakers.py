"""Circuit breakers for domains and proxies, kept in the database so every process agrees.

Seed 002 semantics: CLOSED counts consecutive failures and opens at
``breaker_failure_threshold``; OPEN refuses work for ``breaker_open_seconds``, then is
HALF_OPEN (no write needed: an open breaker whose time is up *is* half-open); in HALF_OPEN
``breaker_success_threshold`` successes close it and any failure opens it again.

Each outcome is one ``UPDATE`` built from ``CASE`` expressions, so two processes recording
outcomes at once never lose a count or flip the state twice. The same statement stamps
``breaker_changed_at`` when the state changes; the caller reads it back (``RETURNING``) and
``transitions`` logs each change and records it as an event (seed: the breaker's statistics
and its transitions). Domains and proxies also count every success and failure
(``tally``), in the writes the fetch policy already makes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import String, and_, case, cast, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db import audit
from forager.db.models import Domain, Proxy
from forager.db.types import utcnow

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
STATES = (CLOSED, OPEN, HALF_OPEN)
log = logging.getLogger(__name__)


def reopen_cutoff(settings: Settings, now: datetime) -> datetime:
    """The latest ``breaker_opened_at`` of an open breaker whose time is up at ``now``."""
    return now - timedelta(seconds=settings.breaker_open_seconds)


def allows(model: Any, settings: Settings, now: datetime) -> Any:
    """SQL condition: the breaker of ``model`` (Domain or Proxy) lets work through now."""
    return allows_since(model, reopen_cutoff(settings, now))


def allows_since(model: Any, cutoff: Any) -> Any:
    """``allows`` with its ``reopen_cutoff`` given: a datetime, or a bound parameter for a
    statement built once and run with new times."""
    return or_(
        model.breaker_state != OPEN,
        model.breaker_opened_at.is_(None),
        model.breaker_opened_at <= cutoff,
    )


def effective_state(
    state: str, opened_at: datetime | None, settings: Settings, now: datetime
) -> str:
    """The state as callers see it: an open breaker whose time is up is half-open."""
    if state == OPEN and (opened_at is None or opened_at <= reopen_cutoff(settings, now)):
        return HALF_OPEN
    return state


def outcome_values(
    model: Any, settings: Settings, now: Any, *, ok: bool, cutoff: Any = None
) -> dict[str, Any]:
    """Column values recording one success or failure on ``model``'s breaker. ``now`` is a
    datetime, or a bound parameter with ``cutoff`` (``now`` less ``breaker_open_seconds``)
    beside it, for a statement built once and run with new times."""
    state = model.breaker_state
    if cutoff is None:
        cutoff = reopen_cutoff(settings, now)
    half_open = or_(state == HALF_OPEN, and_(state == OPEN, model.breaker_opened_at <= cutoff))
    if ok:
        closes = and_(half_open, model.breaker_successes + 1 >= settings.breaker_success_threshold)
        # A stored open breaker whose time is up becomes half_open: a change of the stored state.
        changes = or_(closes, and_(half_open, state != HALF_OPEN))
        return {
            "breaker_state": case((closes, CLOSED), (half_open, HALF_OPEN), else_=state),
            "breaker_successes": case(
                (closes, 0), (half_open, model.breaker_successes + 1), else_=0
            ),
            "breaker_failures": case((state == OPEN, model.breaker_failures), else_=0),
            "breaker_changed_at": case((changes, now), else_=model.breaker_changed_at),
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
        "breaker_changed_at": case((opens, now), else_=model.breaker_changed_at),
    }


def tally(
    model: Any, *, ok: bool, per_id: Iterable[tuple[Any, Any]] | None = None
) -> dict[str, Any]:
    """Column values counting outcomes on a domain's or proxy's breaker: one, or per row when
    one statement records a batch, ``per_id`` giving (id, outcomes) pairs, values or bound
    parameters (``CASE WHEN id = … THEN n``)."""
    column = model.breaker_total_successes if ok else model.breaker_total_failures
    step: Any = 1
    if per_id is not None:
        step = case(*((model.id == row_id, n) for row_id, n in per_id), else_=0)
    return {column.key: column + step}


def returning(model: Any) -> tuple[Any, ...]:
    """The columns ``transitions`` reads back from an outcome's ``UPDATE … RETURNING``."""
    return (model.id, model.breaker_state, model.breaker_changed_at)


def transitions(
    session: AsyncSession,
    kind: str,
    rows: Iterable[Any],
    now: datetime,
    before: str | None = None,
) -> list[tuple[int, str]]:
    """Log and record (audit event ``breaker_<state>``) each breaker whose state the outcome
    written at ``now`` changed; ``rows`` are ``returning(model)`` rows. The changes found."""
    changed = [(row[0], row[1]) for row in rows if row[2] == now]
    for entity_id, state in changed:
        details = {"to": state} if before is None else {"from": before, "to": state}
        log.info("%s %s: circuit breaker %s", kind, entity_id, state)
        audit.record(session, kind, [entity_id], f"breaker_{state}", details)
    return changed


@dataclass(frozen=True, slots=True)
class BreakerView:
    """One domain or proxy breaker, as /health and /metrics show it."""

    kind: str  # domain | proxy
    entity_id: int
    name: str
    state: str  # effective: an open breaker whose time is up is half_open
    failure_count: int
    success_count: int
    opened_at: datetime | None
    total_successes: int = 0
    total_failures: int = 0
    last_state_change: datetime | None = None

    @property
    def total_calls(self) -> int:
        return self.total_successes + self.total_failures


async def not_closed(session: AsyncSession, settings: Settings) -> list[BreakerView]:
    """Every domain and proxy breaker that is open or half-open (closed ones are the norm)."""
    return await views(session, settings, closed=False)


async def views(
    session: AsyncSession, settings: Settings, *, closed: bool = True
) -> list[BreakerView]:
    """Every domain and proxy breaker (``closed=False``: only open and half-open ones)."""
    now = utcnow()
    found: list[BreakerView] = []
    for kind, model, name in (
        ("domain", Domain, Domain.domain_name),
        ("proxy", Proxy, Proxy.proxy_url + ":" + cast(Proxy.proxy_port, String)),
    ):
        query = select(
            model.id,
            name,
            model.breaker_state,
            model.breaker_failures,
            model.breaker_successes,
            model.breaker_opened_at,
            model.breaker_total_successes,
            model.breaker_total_failures,
            model.breaker_changed_at,
        ).order_by(model.id)
        if not closed:
            query = query.where(model.breaker_state != CLOSED)
        found += [
            BreakerView(
                kind,
                r[0],
                r[1],
                effective_state(r[2], r[5], settings, now),
                r[3],
                r[4],
                r[5],
                r[6],
                r[7],
                r[8],
            )
            for r in await session.execute(query)
        ]
    return found
