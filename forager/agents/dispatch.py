"""Handing tasks to agents: each connection runs the worker pool's claim loop
(``worker.claiming.ClaimLoop``), so a slow claim for one agent never holds up the others, with
the connection as lease owner (``agent:<id>:<nonce>``) and its allow-list and fetchers as the
claim's filters. robots.txt is checked here before a task leaves, as before a local fetch.
"""

from __future__ import annotations

import asyncio
import logging
import time

from forager.agents import admin
from forager.agents.admin import A
from forager.agents.connection import Assigned, Connection
from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.types import utcnow
from forager.domains.profile import open_profile
from forager.domains.sticky_sessions import StickySessions
from forager.fetch.fetcher_set import current
from forager.queue.door import ClaimedTask, TaskQueue
from forager.worker.claiming import ClaimLoop

log = logging.getLogger(__name__)


class Dispatcher:
    """Starts each connection's claim loop and hands the claimed tasks to the agent."""

    def __init__(
        self, db: Database, settings: Settings, queue: TaskQueue, box: SecretBox | None = None
    ) -> None:
        self.db = db
        self.settings = settings
        self.queue = queue
        self.box = box  # opens the request profiles' secrets for the agent's fetch
        self.sessions = StickySessions(db, settings, box)  # sticky sessions (issue 33)
        # Until then, idle agents whose fetchers are among these skip claiming: an
        # unrestricted agent's last claim found nothing due.
        self._nothing_until = 0.0
        self._nothing_for: frozenset[str] = frozenset()

    def something_new(self) -> None:
        """Work may be claimable: every agent claims at its next look."""
        self._nothing_until = 0.0

    def start(self, conn: Connection) -> None:
        conn.claiming = ClaimLoop(
            self.settings,
            f"agent {conn.name}",
            room=conn.free,
            may_claim=lambda free: free > 0 and not self._skip(conn),
            claim=lambda free: self.queue.claim(
                conn.owner, free, domains=conn.domains, fetchers=conn.fetchers, by_agent=True
            ),
            hand_out=lambda task: self._assign(conn, task),
            nothing_due=lambda: self._nothing_due(conn),
        )
        conn.feeder = asyncio.create_task(conn.claiming.run(), name=f"agent {conn.name} feed")

    def _skip(self, conn: Connection) -> bool:
        # An agent that can fetch with more kinds may find work the others cannot.
        return time.monotonic() < self._nothing_until and set(conn.fetchers) <= self._nothing_for

    async def _nothing_due(self, conn: Connection) -> None:
        if conn.domains is None:
            # Nothing for an unrestricted agent: nothing for those that fetch with fewer
            # kinds either, so they skip their claims until the next wake-up or poll.
            self._nothing_until = time.monotonic() + self.settings.poll_seconds
            self._nothing_for = frozenset(conn.fetchers)

    async def _assign(self, conn: Connection, task: ClaimedTask) -> int:
        if conn.dropped:
            await self.queue.release(task.id, conn.owner)
            return 0
        try:
            if not await conn.pipeline.allowed_by_robots(task):
                return 0  # failed robots_denied or waiting for robots.txt, as before a local fetch
        except Exception:
            log.exception("task %s: robots.txt check failed; sending it anyway", task.id)
        async with conn.status_lock:
            async with self.db.session() as session:
                if not await self.queue.start_crawl(session, task, conn.owner):
                    return 0  # paused or cancelled since the claim
                if conn.status == A.CONNECTED:
                    await admin.transition(
                        session,
                        conn.agent_id,
                        from_=[A.CONNECTED],
                        to=A.BUSY,
                        details={"task": task.id},
                    )
            conn.status = A.BUSY if conn.status == A.CONNECTED else conn.status
            conn.in_flight[task.id] = assigned = Assigned(task, started=utcnow())
        if conn.dropped:  # the connection went away while the task was being handed out
            conn.in_flight.pop(task.id, None)
            await self.queue.release(task.id, conn.owner)
            return 0
        own = task.fetch_request or {}
        shopper = open_profile(
            task.domain_profile, own.get("profile"), self.box, job=task.job_profile
        )
        # The agent fetches from its own address: its sessions are direct ones (no proxy); a
        # lease the agent never answers for runs out as a dead worker's does.
        sticky = assigned.sticky = await self.sessions.take(task, f"{conn.owner}:{task.id}")
        await conn.send(
            "task",
            task_id=task.id,
            url=task.url,
            user_agent=shopper.user_agent or task.user_agent,
            domain=task.domain_name,
            # One of the fetchers the agent advertised (the claim's filter): its domain's, or
            # for an auto domain the one auto remembers.
            fetcher=current(task.fetcher, task.rung),
            wait_for_selector=task.wait_for_selector,
            # The request profile in clear: the agent sends it and never logs it.
            headers=shopper.headers,
            cookies=shopper.cookies | (sticky.cookies if sticky else {}),
            # A new session is warmed up by the agent first (its cookies come back with it).
            warmup_url=sticky.policy.warmup_url if sticky and sticky.new else None,
            method=own.get("method", "GET"),
            body=own.get("body"),
            body_type=own.get("body_type"),
        )
        return 1
