"""What an operator does with missions: create (one, or a date range split per day), queue,
cancel, list. Every change goes through ``moves`` (compare-and-sets with their events)."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import Mission, WorkerService
from forager.db.queries import get_or_not_found, page
from forager.errors import InvalidRequest, LifecycleConflict
from forager.missions import moves
from forager.missions.clients import ServiceError, WorkerServiceAPI, http_client
from forager.missions.states import CANCELABLE, LANGUAGES, MEDIA_TYPES, Checkpoint

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MissionSpec:
    date_start: date
    date_end: date
    media_type: str
    languages: tuple[str, ...]
    split_by_day: bool = False

    def check(self, max_span_days: int) -> None:
        """End on or after the start, within the span limit; closed sets of values."""
        if self.date_end < self.date_start:
            raise InvalidRequest("date_end must be on or after date_start", field="date_end")
        span = (self.date_end - self.date_start).days + 1
        if span > max_span_days:
            raise InvalidRequest(
                f"the range covers {span} days; at most {max_span_days} "
                "(FORAGER_MISSION_MAX_SPAN_DAYS)",
                field="date_end",
            )
        if self.media_type not in MEDIA_TYPES:
            raise InvalidRequest(f"media_type must be one of {MEDIA_TYPES}", field="media_type")
        unknown = sorted(set(self.languages) - set(LANGUAGES))
        if not self.languages or unknown:
            raise InvalidRequest(
                f"languages must be some of {', '.join(LANGUAGES)}", field="languages"
            )

    def ranges(self) -> list[tuple[date, date]]:
        if not self.split_by_day:
            return [(self.date_start, self.date_end)]
        days = (self.date_end - self.date_start).days + 1
        dates = [self.date_start + timedelta(days=n) for n in range(days)]
        return [(day, day) for day in dates]


async def create(
    db: Database, spec: MissionSpec, *, queue: bool, by: str, max_span_days: int
) -> list[Mission]:
    """New missions (``draft``), queued at once when asked."""
    spec.check(max_span_days)
    languages = list(dict.fromkeys(spec.languages))
    async with db.session() as session:
        missions = [
            Mission(
                date_start=start,
                date_end=end,
                media_type=spec.media_type,
                languages=languages,
                status="draft",
                retry_count=0,
                writer_retry_count=0,
            )
            for start, end in spec.ranges()
        ]
        session.add_all(missions)
        await session.flush()
        ids = [m.id for m in missions]
        if queue:
            await moves.queue(session, ids, by)
    async with db.reader() as session:
        rows = await session.scalars(
            select(Mission).where(Mission.id.in_(ids)).order_by(Mission.id)
        )
        return list(rows)


async def queue(db: Database, ids: list[int], by: str) -> tuple[list[int], dict[int, str]]:
    """Seed §5.1 for the selected missions: which were queued, which refused and why."""
    async with db.session() as session:
        return await moves.queue(session, ids, by)


async def get(session: AsyncSession, mission_id: int) -> Mission:
    missing = f"mission {mission_id} does not exist"
    return await get_or_not_found(session, Mission, mission_id, missing)


async def cancel(
    db: Database, settings: Settings, box: SecretBox, mission_id: int, by: str
) -> Mission:
    """Seed §5.4: ``canceled`` now; a scrape job in flight is cancelled on its service."""
    for _ in range(5):  # the orchestrator may move it between our read and our write
        async with db.session() as session:
            m = await get(session, mission_id)
            if m.status not in CANCELABLE:
                raise LifecycleConflict(
                    f"cannot cancel a mission that is {m.status}", current_status=m.status
                )
            service = await session.get(WorkerService, m.worker_id) if m.worker_id else None
            if not await moves.cancel(session, m, by):
                continue
        if m.checkpoint == Checkpoint.EXTRACAO and m.worker_job_id and service is not None:
            await _cancel_job(settings, box, service, m.worker_job_id)
        async with db.reader() as session:
            return await get(session, mission_id)
    async with db.reader() as session:
        m = await get(session, mission_id)
    raise LifecycleConflict("the mission kept changing; try again", current_status=m.status)


async def _cancel_job(
    settings: Settings, box: SecretBox, service: WorkerService, job_id: str
) -> None:
    """``POST /scrape/{job_id}/cancel``; the mission is canceled whatever the service says."""
    async with http_client(settings.mission_http_timeout_seconds) as http:
        api = WorkerServiceAPI(
            http, service.url, box.decrypt(service.api_key), settings.mission_max_response_bytes
        )
        with contextlib.suppress(ServiceError):
            await api.cancel_job(job_id)
            return
    log.warning("worker service %s did not confirm the cancel of job %s", service.name, job_id)


@dataclass(frozen=True, slots=True)
class MissionFilter:
    status: str | None = None
    checkpoint: str | None = None
    worker_id: int | None = None
    error_code: str | None = None
    date_from: date | None = None  # missions covering any day from here…
    date_to: date | None = None  # …to here

    def query(self) -> Select[Any]:
        query = select(Mission)
        if self.status is not None:
            query = query.where(Mission.status == self.status)
        if self.checkpoint is not None:
            query = query.where(Mission.checkpoint == self.checkpoint)
        if self.worker_id is not None:
            query = query.where(Mission.worker_id == self.worker_id)
        if self.error_code is not None:
            query = query.where(Mission.error_code == self.error_code)
        if self.date_from is not None:
            query = query.where(Mission.date_end >= self.date_from)
        if self.date_to is not None:
            query = query.where(Mission.date_start <= self.date_to)
        return query


async def listing(
    session: AsyncSession, filters: MissionFilter, *, limit: int, offset: int
) -> tuple[list[Mission], int]:
    """Missions, newest first, with the total for pagination."""
    return await page(session, filters.query(), Mission.id.desc(), limit=limit, offset=offset)
