"""Episodes of the rules with a duration (``rules.EPISODE_KINDS``): firing, then cleared.

One ``alert_episodes`` row per rule and subject (``domain:3``, ``batch:nightly``, ``proxies``,
``monitor:7``, ``crawl_job:2``) says whether the condition holds. ``move`` changes it with a
compare-and-set in the caller's transaction, and only the call whose update took tells anyone:
however many processes evaluate the same rule, and across restarts, a condition fires once per
episode and its end is told once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.alerts import outbox
from forager.db.dialect import insert_ignoring_conflicts
from forager.db.models import AlertEpisode, AlertRule

FIRING, CLEARED = "firing", "cleared"
_E = AlertEpisode


async def firing(session: AsyncSession, rule_id: int) -> dict[str, datetime | None]:
    """The subjects ``rule_id`` fires for now, with when each episode opened."""
    rows = await session.execute(
        select(_E.subject, _E.opened_at).where(_E.rule_id == rule_id, _E.state == FIRING)
    )
    return {row.subject: row.opened_at for row in rows}


async def move(
    session: AsyncSession,
    rule_id: int,
    subject: str,
    *,
    fire: bool,
    value: float | None,
    now: datetime,
) -> bool:
    """Open (``fire``) or clear the episode of ``rule_id`` for ``subject``; True when this
    call moved it (the caller tells the rule's target), False when it already was so."""
    if fire:
        await session.execute(
            insert_ignoring_conflicts(session, AlertEpisode.__table__, on=["rule_id", "subject"]),
            [{"rule_id": rule_id, "subject": subject, "state": CLEARED}],
        )
    values: dict[str, Any] = {"state": FIRING if fire else CLEARED, "value": value}
    values["opened_at" if fire else "cleared_at"] = now
    moved = await session.execute(
        update(_E)
        .where(
            _E.rule_id == rule_id, _E.subject == subject, _E.state == (CLEARED if fire else FIRING)
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(moved, "rowcount", 0))


def delivery(
    rule: AlertRule,
    subject_type: str,
    subject_id: int | str,
    data: dict[str, Any],
    now: datetime,
    *,
    fire: bool,
    since: datetime | None = None,
) -> dict[str, Any]:
    """The outbox row telling that an episode opened or cleared (``state`` in the payload;
    a cleared one says since when the condition held)."""
    made = outbox.delivery(rule, subject_type, subject_id, data, now)
    made["payload"]["state"] = FIRING if fire else CLEARED
    if not fire:
        made["payload"]["since"] = None if since is None else since.isoformat()
    return made
