"""The orchestrator loop (seed §2.3): one run, from recovery to its end.

Shaped like ``forager.worker.pool``: one driver task per worker service (a slow or hanging
service never holds up the others), one task per mission in the writer phase, a wake-up signal
with polling as the fallback, and a bounded stop. The loop ends by itself when no mission is
``queued`` or ``running`` (§6.7): every session is ended and every proxy given back (§5.5).
Stopped by the operator (or losing the lease), it ends the idle sessions only: missions in
flight stay as they are, and the next run's recovery picks them up.

A step that raises is seed §7.1's ERROR500 (internal error) for the mission it was working on,
which §7.2 does not retry: the mission fails at once, its traceback in the log ("verificar
logs"). Only a transient failure of the database or the network (``transient``) is not the
mission's: that step is tried again every loop tick, as the failure could not be written anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from forager.db.models import Mission, WorkerService
from forager.missions import control, handoff, recovery, sessions
from forager.missions.codes import MissionFailure
from forager.missions.context import Env, Limits
from forager.missions.driver import Memo, counts
from forager.missions.driver import step as worker_step
from forager.missions.policy import internal_failure
from forager.missions.states import Checkpoint, MissionStatus
from forager.missions.states import WorkerStatus as W

log = logging.getLogger(__name__)

FINISHED, STOPPED = "finished", "stopped"
Step = Callable[[], Awaitable[tuple[float | None, bool]]]
MissionOf = Callable[[], Awaitable[int | None]]


# PostgreSQL's SQLSTATE classes that say nothing of the statement: connection exception,
# transaction rollback (deadlock, serialization), insufficient resources, operator intervention.
_PASSING_SQLSTATES = ("08", "40", "53", "57")


def transient(exc: BaseException) -> bool:
    """The database or the network failed the step, not the mission (a restart, a cut
    connection, a full pool, SQLite busy, a deadlock): nothing could be written about it now,
    and the same step may well pass next time."""
    if isinstance(exc, DBAPIError):
        state = str(getattr(exc.orig, "sqlstate", None) or "")
        if exc.connection_invalidated or state.startswith(_PASSING_SQLSTATES):
            return True
    return isinstance(exc, OSError | TimeoutError | OperationalError | InterfaceError | PoolTimeout)


class Orchestrator:
    """One run of the loop, in the process that holds the lease."""

    def __init__(self, env: Env, generation: int) -> None:
        self.env = env
        self.env.wake = self.wake
        self.generation = generation
        self.limits = Limits(5, 2)
        self.drivers: dict[int, asyncio.Task[None]] = {}
        self.writers: dict[int, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._lost = False

    def wake(self) -> None:
        """Something changed (missions queued, a scrape handed over, a proxy freed)."""
        self._wake.set()
        self._wake = asyncio.Event()

    def stop(self) -> None:
        """End this run soon: steps in progress finish, nothing new starts."""
        self._stopping.set()
        self.wake()

    def abort(self) -> None:
        """The lease is gone: stop without touching any service (another loop drives them)."""
        self._lost = True
        self.stop()

    async def run(self) -> str:
        """Recover, loop until there is no work or a stop, end the sessions; how it ended."""
        settings = self.env.settings
        await recovery.recover(self.env)
        outcome = STOPPED
        try:
            while not self._stopping.is_set():
                wake = self._wake
                view = await control.read(self.env.db)
                self.limits = Limits(view.session_limit, view.max_retries)
                if not view.run_requested:
                    break
                self._sync_drivers(await self._service_ids())
                self._sync_writers(await self._storage_ids())
                queued, running = await counts(self.env)
                if queued == 0 and running == 0:
                    outcome = FINISHED
                    break
                await self._sleep(settings.mission_loop_seconds, wake)
        finally:
            self._stopping.set()
            self.wake()
            await self._join()
        if not self._lost:
            await self._end_sessions(everyone=outcome == FINISHED)
        return outcome

    # -- tasks -------------------------------------------------------------------------------

    async def _service_ids(self) -> list[int]:
        async with self.env.db.reader() as session:
            rows = await session.scalars(
                select(WorkerService.id).where(
                    (WorkerService.active.is_(True))
                    | (WorkerService.current_mission_id.is_not(None))
                    | (WorkerService.status != W.IDLE)
                )
            )
            return list(rows)

    async def _storage_ids(self) -> list[int]:
        async with self.env.db.reader() as session:
            rows = await session.scalars(
                select(Mission.id).where(
                    Mission.status == MissionStatus.RUNNING,
                    Mission.checkpoint == Checkpoint.ARMAZENAMENTO,
                )
            )
            return list(rows)

    def _sync_drivers(self, ids: list[int]) -> None:
        for worker_id in ids:
            if worker_id not in self.drivers or self.drivers[worker_id].done():
                self.drivers[worker_id] = asyncio.create_task(
                    self._repeat(*self._worker(worker_id)), name=f"mission-worker-{worker_id}"
                )

    def _sync_writers(self, ids: list[int]) -> None:
        for mission_id in ids:
            if mission_id not in self.writers or self.writers[mission_id].done():
                self.writers[mission_id] = asyncio.create_task(
                    self._repeat(*self._writer(mission_id)), name=f"mission-writer-{mission_id}"
                )

    def _worker(self, worker_id: int) -> tuple[Step, MissionOf]:
        """A worker service's step, and the mission it works on (the one a failure is of)."""
        memo = Memo()

        async def once() -> tuple[float | None, bool]:
            delay = await worker_step(self.env, worker_id, self.limits, memo)
            return delay, memo.wakeable

        async def mission() -> int | None:
            async with self.env.db.reader() as session:
                return await session.scalar(
                    select(WorkerService.current_mission_id).where(WorkerService.id == worker_id)
                )

        return once, mission

    def _writer(self, mission_id: int) -> tuple[Step, MissionOf]:
        watch = handoff.WriterWatch()

        async def once() -> tuple[float | None, bool]:
            return await handoff.step(self.env, mission_id, self.limits, watch), False

        async def mission() -> int | None:
            return mission_id

        return once, mission

    async def _repeat(self, once: Step, mission: MissionOf) -> None:
        """Run steps until one says it is done; a failing step fails its mission (ERROR500),
        never the loop."""
        while not self._stopping.is_set():
            wake = self._wake
            try:
                delay, wakeable = await once()
            except Exception as exc:
                await self._step_failed(exc, mission)
                delay, wakeable = self.env.settings.mission_loop_seconds, False
            if delay is None:
                return
            if delay > 0:
                await self._sleep(delay, wake if wakeable else None)

    async def _step_failed(self, exc: Exception, mission: MissionOf) -> None:
        """Log the failure; unless it is transient, it is ERROR500 for the step's mission (a
        step with no mission is tried again, as there is none to fail)."""
        if transient(exc):
            log.warning(
                "mission step failed (%s: %s); trying again shortly", type(exc).__name__, exc
            )
            return
        try:
            mission_id = await mission()
            log.error("mission %s: internal error in a step (ERROR500)", mission_id, exc_info=exc)
            if mission_id is None:
                return
            first = (str(exc).splitlines() or [""])[0][:500]
            failure = MissionFailure("ERROR500", f"{type(exc).__name__}: {first}".rstrip(": "))
            await internal_failure(self.env, mission_id, failure, self.limits)
        except Exception:
            log.exception("recording an internal error (ERROR500) failed; trying again shortly")

    async def _sleep(self, seconds: float, wake: asyncio.Event | None) -> None:
        waits = [asyncio.ensure_future(self._stopping.wait())]
        if wake is not None:
            waits.append(asyncio.ensure_future(wake.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()

    async def _join(self) -> None:
        """Let steps in progress end (bounded by one service call), then cancel the rest."""
        tasks = [*self.drivers.values(), *self.writers.values()]
        if tasks:
            grace = self.env.settings.mission_http_timeout_seconds * 2
            _, late = await asyncio.wait(tasks, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.drivers.clear()
        self.writers.clear()

    async def _end_sessions(self, *, everyone: bool) -> None:
        """Seed §5.5 (``everyone``), or only the sessions no mission is using (a stop)."""
        async with self.env.db.reader() as session:
            services = list(await session.scalars(select(WorkerService)))
        reason = "queue_empty" if everyone else "orchestrator_stopped"
        for service in services:
            if not everyone and service.current_mission_id is not None:
                continue
            if service.status == W.IDLE and service.current_mission_id is None:
                continue
            with contextlib.suppress(Exception):
                await sessions.close(self.env, service, reason)
