"""One step for one worker service, chosen by its state (seed §5.2 step 2.1).

``idle`` opens a session when there is work; ``initializing`` polls it; ``ready`` claims the
next mission (or resumes the one it is retrying, or ends a session that reached
``session_limit``); ``scraping`` watches the job; ``error`` resets. Each step returns how long
to wait before the next one, and whether a wake-up (new work, a freed proxy) may cut it short.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select

from forager.db.models import Mission, WorkerService
from forager.missions import moves, proxy_lease, sessions, workers
from forager.missions.context import Env, Limits
from forager.missions.scrape import JobWatch
from forager.missions.scrape import step as scrape_step
from forager.missions.states import MissionStatus
from forager.missions.states import WorkerStatus as W


@dataclass
class Memo:
    """What one service's driver keeps between steps."""

    watch: JobWatch = field(default_factory=JobWatch)
    waiting_for_proxy: bool = False
    wakeable: bool = False


async def _has_queued(env: Env) -> bool:
    async with env.db.reader() as session:
        found = await session.scalar(
            select(Mission.id).where(Mission.status == MissionStatus.QUEUED).limit(1)
        )
    return found is not None


async def step(env: Env, worker_id: int, limits: Limits, memo: Memo) -> float | None:
    """One step; ``None`` when the service is gone or switched off with nothing to finish."""
    memo.wakeable = False
    async with env.db.reader() as session:
        worker = await session.get(WorkerService, worker_id)
    if worker is None:
        return None
    loop = env.settings.mission_loop_seconds
    if not worker.active and worker.current_mission_id is None:
        if worker.status != W.IDLE:
            await sessions.close(env, worker, "deactivated")
        return None
    if worker.status == W.SCRAPING:
        return await scrape_step(env, worker, limits, memo.watch)
    if worker.status == W.INITIALIZING:
        return await sessions.check(env, worker, limits)
    if worker.status == W.ERROR:
        return await sessions.reset(env, worker)
    if worker.status == W.IDLE:
        if worker.current_mission_id is None and not await _has_queued(env):
            memo.wakeable = True
            return loop
        if await sessions.open_session(env, worker, limits):
            memo.waiting_for_proxy = False
            return env.settings.mission_session_poll_seconds
        if not memo.waiting_for_proxy:
            memo.waiting_for_proxy = True
            await sessions.no_proxy(env, worker)
        memo.wakeable = True
        return loop
    return await _ready(env, worker, limits, memo)


async def _ready(env: Env, worker: WorkerService, limits: Limits, memo: Memo) -> float:
    if worker.current_mission_id is not None:  # a retried mission resumes on the new session
        async with env.db.session() as session:
            await workers.assign(session, worker.id, worker.current_mission_id)
        return 0
    if worker.session_count >= limits.session_limit:
        await sessions.close(env, worker, "session_limit")
        env.wake()  # its proxy is free for the others
        return 0
    if not await _has_queued(env):
        memo.wakeable = True
        return env.settings.mission_loop_seconds
    async with env.db.session() as session:
        proxy = await proxy_lease.held_by(session, worker.id)
        name = None if proxy is None else proxy_lease.proxy_label(proxy)
        claimed = await moves.claim(session, worker, name)
    return 0 if claimed is not None else env.settings.mission_loop_seconds


async def counts(env: Env) -> tuple[int, int]:
    """Seed §6.7: missions queued and running."""
    async with env.db.reader() as session:
        rows = await session.execute(
            select(Mission.status, func.count())
            .where(Mission.status.in_([MissionStatus.QUEUED, MissionStatus.RUNNING]))
            .group_by(Mission.status)
        )
        found: dict[str, int] = {row[0]: row[1] for row in rows}
    return found.get(MissionStatus.QUEUED, 0), found.get(MissionStatus.RUNNING, 0)
