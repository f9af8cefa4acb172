"""Who may claim a domain's tasks: its ``routing`` (issue 33; docs/AGENTS.md "Routing").

- ``any`` (default): agents and workers alike — built-in workers, ``forager worker``
  processes and the Celery relay.
- ``agents_only``: agents only. While none is connected its tasks wait (``/api/progress``
  names the reason, ``no_agent``).
- ``agents_preferred``: agents, and workers too while *no agent is connected*: no agent row
  is ``connected`` or ``busy``, unrevoked, with a heartbeat within
  ``FORAGER_AGENT_TIMEOUT_SECONDS``. Whether a connected agent's allow-list or fetchers fit
  the domain is not asked (the database does not hold them): an agent that cannot take the
  domain still keeps the workers off it, so give such domains agents that can.

The rule is a ``WHERE`` clause of the claim (``queue/claim.py``), so a worker never leases a
task it may not fetch, on every engine and in every process.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, exists, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db.models import Agent, Domain, Worker
from forager.db.types import utcnow

ANY = "any"
AGENTS_PREFERRED = "agents_preferred"
AGENTS_ONLY = "agents_only"
ROUTINGS = (ANY, AGENTS_PREFERRED, AGENTS_ONLY)
# ``forager.agents.admin.LIVE``: the statuses of an agent holding a live connection (that
# package sits above this one and cannot be imported here).
LIVE_AGENT = ("connected", "busy")


def agent_fresh(settings: Settings, now: datetime) -> datetime:
    """The oldest heartbeat of an agent still counted as connected at ``now``."""
    return now - timedelta(seconds=settings.agent_timeout_seconds)


def agent_connected(fresh: Any) -> Any:
    """True while some agent is connected (live status, a heartbeat since ``fresh``, not
    revoked); ``fresh`` is ``agent_fresh`` or a bound parameter of it."""
    return exists().where(
        Agent.status.in_(LIVE_AGENT),
        Agent.revoked_at.is_(None),
        Agent.last_heartbeat_at >= fresh,
    )


async def claims_alone(
    session: AsyncSession, settings: Settings, worker_id: str, workers_since: datetime
) -> bool:
    """Whether ``worker_id`` is the only one claiming tasks: no other worker process seen since
    ``workers_since`` and not stopped, no connected agent."""
    now = utcnow()
    others = exists().where(
        Worker.id != worker_id,
        Worker.last_seen_at >= workers_since,
        Worker.stopped_at.is_(None),
        Worker.concurrency > 0,
    )
    connected = agent_connected(agent_fresh(settings, now))
    return not await session.scalar(select(or_(others, connected)))


def claimable(fresh: Any, *, by_agent: bool) -> list[Any]:
    """The claim's condition on ``Domain.routing``: none for an agent's claim (``fresh``:
    ``agent_connected``)."""
    if by_agent:
        return []
    return [
        or_(
            Domain.routing == ANY,
            and_(Domain.routing == AGENTS_PREFERRED, ~agent_connected(fresh)),
        )
    ]
