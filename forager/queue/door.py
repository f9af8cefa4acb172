"""The queue's front door: the only way code outside ``queue/`` moves a task.

The rule (checked by ``tests/test_queue_door.py``): outside ``forager/queue/``, code imports
from this module whatever moves a task — ``TaskQueue``'s methods for workers, agents, the
relay and the scheduler; the submit and operator functions re-exported below for the API, the
CLI and the domains' service — and the records they take and return (``ClaimedTask``,
``Ending``, ``FetchAttempt``, ``SubmitSpec``, a crawl job's ``Discovery`` …). Four modules only
read or compute and may be imported directly: ``lifecycle`` (statuses), ``urls``
(``normalize_url``), ``counts`` (task counts) and ``adaptive`` (the recrawl frequency's
arithmetic and signals). Every other module here is the queue's own business: ``claim.py``
(leasing due work), ``routing.py`` (who may claim a domain's tasks: agents, workers),
``discovered.py`` (a crawl job's links as tasks), ``moves.py`` (named
compare-and-set moves, ``settle`` for many at once), ``attempts.py`` (``crawl_attempts`` rows and
their outcomes), ``scheduler.py`` (expired leases, due recrawls), ``dispatch.py`` (Celery's
outbox), ``submit.py``, ``admin.py``, ``batches.py`` (a batch's moves and progress) and
``announce.py`` (``NEW_WORK``: the channel that tells listening workers of new work). A change
to the task lifecycle reads and edits only ``queue/``.

The transaction rule is the same everywhere: a method that takes a ``session`` runs inside the
caller's transaction; one that does not opens exactly one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.db.engine import Database
from forager.db.types import utcnow
from forager.queue import claim as claiming
from forager.queue import dispatch, moves, routing, scheduler
from forager.queue.admin import (
    RESTART,
    RecrawlChange,
    cancel,
    delete_domain_tasks,
    pause,
    restart,
    restart_failed,
    restart_parsing,
    restart_parsing_bulk,
    resume,
    set_priority,
    set_recrawl,
)
from forager.queue.announce import NEW_WORK
from forager.queue.attempts import FetchAttempt
from forager.queue.batches import (
    BatchAction,
    BatchMoved,
    BatchProgress,
    list_batches,
    move_batch,
    show_batch,
)
from forager.queue.discovered import Discovery, Tally, enqueue, move_job_tasks
from forager.queue.dispatch import OWNER_PREFIX, QUEUES, Message
from forager.queue.moves import FETCHED_VIA, Ending
from forager.queue.submit import SubmitOutcome, SubmitSpec, submit_urls
from forager.queue.tasks import ClaimedTask

__all__ = [
    "FETCHED_VIA",
    "NEW_WORK",
    "OWNER_PREFIX",
    "QUEUES",
    "RESTARTABLE",
    "BatchAction",
    "BatchMoved",
    "BatchProgress",
    "ClaimedTask",
    "Discovery",
    "Ending",
    "FetchAttempt",
    "Message",
    "RecrawlChange",
    "SubmitOutcome",
    "SubmitSpec",
    "Tally",
    "TaskQueue",
    "cancel",
    "delete_domain_tasks",
    "enqueue",
    "list_batches",
    "move_batch",
    "move_job_tasks",
    "pause",
    "restart",
    "restart_failed",
    "restart_parsing",
    "restart_parsing_bulk",
    "resume",
    "set_priority",
    "set_recrawl",
    "show_batch",
    "submit_urls",
]
# The statuses a task can be restarted from (crawled again with ``restart``).
RESTARTABLE = RESTART.from_
# Sent outbox rows are kept this long (for a look when debugging), then deleted.
_SENT_KEPT = timedelta(hours=1)


class TaskQueue:
    """Claiming, moves and the scheduler, for one database."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings

    def _lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.settings.lease_seconds)

    # -- claiming (one transaction each) --------------------------------------------------

    async def claim(
        self,
        worker_id: str,
        limit: int = 1,
        *,
        domains: Sequence[str] | None = None,
        fetchers: Sequence[str] | None = None,
        start: bool = False,
        by_agent: bool = False,
        answered: Sequence[int] = (),
    ) -> list[ClaimedTask]:
        """Lease up to ``limit`` due pending tasks, honouring every domain's politeness.

        ``domains`` restricts the claim to those domain names (an agent's allow-list),
        ``fetchers`` to domains fetched with one of those kinds (what an agent can do);
        ``start`` moves them on to ``crawling`` at once. ``by_agent`` says an agent claims:
        only then are ``agents_only`` domains (and ``agents_preferred`` ones while an agent
        is connected) claimable (``queue/routing.py``). ``answered`` are this claimer's tasks
        whose request is over (their page is being parsed or written): they hold no slot of
        their domain's ``max_concurrent_requests`` in this claim (``claim._room``).
        """
        now = utcnow()
        claimed: list[ClaimedTask] = []
        async with self.db.session() as session:
            for domain_id in await claiming.candidate_domains(
                session, self.settings, now, domains, fetchers, by_agent=by_agent
            ):
                if len(claimed) >= limit:
                    break
                claimed += await claiming.claim_from_domain(
                    session,
                    self.settings,
                    domain_id,
                    worker_id,
                    now,
                    limit - len(claimed),
                    self._lease_until(now),
                    start=start,
                    by_agent=by_agent,
                    answered=answered,
                )
        return claimed

    async def claims_alone(self, worker_id: str, workers_since: datetime) -> bool:
        """Whether ``worker_id`` is the only one claiming: no other worker process seen since
        ``workers_since`` (and not stopped), no connected agent (``routing.claims_alone``)."""
        async with self.db.reader() as session:
            return await routing.claims_alone(session, self.settings, worker_id, workers_since)

    async def claim_parse(self, worker_id: str, limit: int = 1) -> list[ClaimedTask]:
        """Lease downloaded tasks for the parse phase (restart-parsing, expired parse leases)."""
        now = utcnow()
        async with self.db.session() as session:
            return await claiming.claim_parse(
                session, worker_id, now, limit, self._lease_until(now)
            )

    # -- Celery dispatch (queue/dispatch.py) ------------------------------------------------

    async def claim_into_outbox(self, owner: str) -> int:
        """Claim due work under the relay's ``owner`` into the outbox, up to
        ``celery_max_queued`` tasks waiting for a Celery worker; returns how many."""
        now = utcnow()
        async with self.db.session() as session:
            room = self.settings.celery_max_queued - await dispatch.waiting(session)
            if room <= 0:
                return 0
            return await dispatch.claim_into_outbox(
                session, self.settings, owner, now, room, self._lease_until(now)
            )

    async def publish_outbox(
        self, send: Callable[[list[Message]], Awaitable[None]], limit: int = 500
    ) -> int:
        """Hand the oldest unsent outbox rows to ``send`` and mark them sent once it returns
        (rows stay locked meanwhile); returns how many. A crash before the commit leaves them
        unsent: they are sent again, and the second delivery finds nothing to take."""
        async with self.db.session() as session:
            messages = await dispatch.unsent(session, limit)
            if not messages:
                return 0
            await send(messages)
            now = utcnow()
            await dispatch.mark_sent(session, [m.id for m in messages], now)
            await dispatch.forget_sent(session, now - _SENT_KEPT)
            return len(messages)

    async def take(self, task_id: int, owner: str, worker_id: str) -> ClaimedTask | None:
        """A Celery worker takes a task the relay claimed (None: not waiting under ``owner``)."""
        now = utcnow()
        async with self.db.session() as session:
            return await dispatch.take(
                session, task_id, owner, worker_id, now, self._lease_until(now)
            )

    async def next_gate_opening(self) -> datetime | None:
        """When the earliest closed politeness gate (``politeness.gate``) with due work opens,
        so an idle worker sleeps until then."""
        async with self.db.reader() as session:
            return await claiming.next_gate_opening(session, utcnow())

    async def start_crawl(self, session: AsyncSession, task: ClaimedTask, worker_id: str) -> bool:
        """``queued → crawling``, just before the request goes out (a task claimed without
        ``start``: an agent's, or a pipeline handed one)."""
        return await moves.start_crawl(session, task, worker_id)

    async def to_parsing(self, session: AsyncSession, task: ClaimedTask, worker_id: str) -> bool:
        """``queued_parse → parsing``: a stored page is about to be parsed again."""
        return await moves.to_parsing(session, task, worker_id)

    async def postpone(
        self,
        session: AsyncSession,
        task: ClaimedTask,
        worker_id: str,
        *,
        reason: str,
        seconds: float,
    ) -> bool:
        """``crawling → pending``, no retry spent (no proxy free now): back ``seconds`` later."""
        return await moves.postpone(session, task, worker_id, reason=reason, seconds=seconds)

    async def fail(
        self,
        session: AsyncSession,
        task: ClaimedTask,
        worker_id: str,
        *,
        error_type: str,
        message: str,
        http_status_code: int | None = None,
    ) -> str | None:
        """Retry later with backoff, or fail for good; returns the new status (None: lost lease)."""
        return await moves.fail(
            session,
            self.settings,
            task,
            worker_id,
            error_type=error_type,
            message=message,
            http_status_code=http_status_code,
        )

    async def settle(self, session: AsyncSession, endings: Sequence[Ending]) -> dict[int, str]:
        """End many leased tasks in one go and record their tries (``crawl_attempts``);
        ``{task id: new status}`` for those still held."""
        return await moves.settle(session, self.settings, endings)

    async def adapt(
        self, session: AsyncSession, signals: Sequence[tuple[ClaimedTask, str]]
    ) -> None:
        """Move the recrawl frequency of adaptive tasks ``settle`` just completed after what
        their crawl saw (``adaptive`` signals)."""
        await moves.adapt(session, signals)

    async def discover(
        self, session: AsyncSession, discoveries: Sequence[Discovery]
    ) -> dict[int, Tally]:
        """Queue the links crawl jobs found, within their budgets (``queue/discovered.py``)."""
        return await enqueue(session, self.settings, discoveries)

    # -- one transaction each --------------------------------------------------------------

    async def release(self, task_id: int, worker_id: str) -> bool:
        """Give a leased task back untouched (graceful shutdown): no retry is consumed."""
        async with self.db.session() as session:
            return await moves.release(session, task_id, worker_id) is not None

    async def heartbeat(self, worker_id: str) -> int:
        """Extend the leases of every task ``worker_id`` holds; returns how many."""
        async with self.db.session() as session:
            return await moves.heartbeat(session, worker_id, self._lease_until(utcnow()))

    async def reap_expired_leases(self) -> int:
        """Return tasks of dead workers to the queue, consuming exactly one retry each."""
        async with self.db.session() as session:
            return await scheduler.reap_expired_leases(session, utcnow())

    async def requeue_due_recrawls(self, limit: int = 1000) -> int:
        """Recurring tasks whose ``next_crawl_at`` has come go back to ``pending``."""
        async with self.db.session() as session:
            return await scheduler.requeue_due_recrawls(session, utcnow(), limit)
