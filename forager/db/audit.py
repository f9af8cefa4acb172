"""Audit events (the ``events`` table), buffered per transaction and written in one insert."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from itertools import groupby
from typing import Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.many import Many
from forager.db.models import Event
from forager.db.types import utcnow

_PENDING = "forager.pending_events"
_EVENTS = cast(Table, Event.__table__)
_INSERT = Many(insert(_EVENTS))

# Who acts: the API key's name inside an API request (set by ``forager.api.auth``), ``cli``
# in an operator command; unset (NULL) in workers, whose events are the system's own. A
# context variable reaches every event a request causes, in whichever service records it.
ACTOR: ContextVar[str | None] = ContextVar("forager_actor", default=None)

# What else sees a transaction's events before they are written (alerts: the composition root
# installs ``forager.alerts.detect.events``), in the same transaction.
FlushHook = Callable[[AsyncSession, Sequence[dict[str, Any]]], Awaitable[None]]
_HOOKS: list[FlushHook] = []


def on_flush(hook: FlushHook) -> None:
    """Run ``hook`` on every transaction's events, before they are inserted (idempotent)."""
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def record(
    session: AsyncSession,
    entity_type: str,
    entity_ids: Iterable[int | str],
    event: str,
    details: dict[str, Any] | None = None,
) -> None:
    """Queue one event row per entity; ``flush`` writes them before the transaction commits."""
    now = utcnow()
    actor = ACTOR.get()
    rows: list[dict[str, Any]] = session.info.setdefault(_PENDING, [])
    rows.extend(
        {
            "entity_type": entity_type,
            "entity_id": str(entity_id),
            "event": event,
            "details": details,
            "created_at": now,
            "actor": actor,
        }
        for entity_id in entity_ids
    )


async def flush(session: AsyncSession) -> None:
    """Write the queued events of ``session`` (called by ``Database.session`` before commit)."""
    rows = session.info.pop(_PENDING, None)
    if rows:
        for hook in _HOOKS:
            await hook(session, rows)
        # As Core rows (no mapper per row), in order; an event without details gets SQL NULL,
        # not a JSON null, so a run of those goes without the key.
        for bare, run in groupby(rows, key=lambda row: row["details"] is None):
            group = list(run)
            if bare:
                group = [_without_details(row) for row in group]
            await _INSERT.execute(session, group)


def _without_details(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "details"}
