"""Worker services and writers: add, change, remove, test. API keys are encrypted here and
leave only as ciphertext in their row; nothing returns or logs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import Mission, Proxy, WorkerService, Writer
from forager.db.queries import get_or_not_found, page
from forager.db.types import utcnow
from forager.errors import Conflict
from forager.missions.clients import ServiceError, WorkerServiceAPI, WriterAPI, http_client
from forager.missions.proxy_lease import proxy_label
from forager.missions.states import MissionStatus, WorkerStatus

Service = TypeVar("Service", WorkerService, Writer)
_ENTITY = {WorkerService: "worker_service", Writer: "writer"}
_NOUN = {WorkerService: "worker service", Writer: "writer"}


def _encrypting(values: dict[str, Any], box: SecretBox) -> dict[str, Any]:
    if "api_key" not in values:
        return values
    return {**values, "api_key": box.encrypt(values["api_key"])}


async def get(session: AsyncSession, model: type[Service], service_id: int) -> Service:
    missing = f"{_NOUN[model]} {service_id} does not exist"
    return await get_or_not_found(session, model, service_id, missing)


async def listing(
    session: AsyncSession, model: type[Service], *, limit: int, offset: int
) -> tuple[list[Service], int]:
    return await page(session, select(model), model.id, limit=limit, offset=offset)


async def create(
    db: Database, box: SecretBox, model: type[Service], values: dict[str, Any]
) -> Service:
    """Add one; ``Conflict`` when the name is taken."""
    try:
        async with db.session() as session:
            row = model(**_encrypting(values, box))
            session.add(row)
            await session.flush()
            audit.record(session, _ENTITY[model], [row.id], "created", {"name": row.name})
    except IntegrityError as exc:
        raise Conflict(f"a {_NOUN[model]} named {values['name']!r} exists") from exc
    return row


async def update(
    db: Database, box: SecretBox, model: type[Service], service_id: int, changes: dict[str, Any]
) -> Service:
    """Change fields (a new API key is encrypted); ``Conflict`` on a taken name."""
    try:
        async with db.session() as session:
            row = await get(session, model, service_id)
            for name, value in _encrypting(changes, box).items():
                setattr(row, name, value)
            if changes:
                audit.record(
                    session, _ENTITY[model], [service_id], "updated", {"fields": sorted(changes)}
                )
            await session.flush()
    except IntegrityError as exc:
        raise Conflict(f"another {_NOUN[model]} is named {changes.get('name')!r}") from exc
    return row


async def delete(db: Database, model: type[Service], service_id: int) -> None:
    """Remove one that nothing is using (missions keep their history, without the link)."""
    async with db.session() as session:
        row = await get(session, model, service_id)
        if isinstance(row, WorkerService) and (
            row.current_mission_id is not None or row.status != WorkerStatus.IDLE
        ):
            raise Conflict(
                f"worker service {service_id} is {row.status}: deactivate it and wait until it "
                "is idle"
            )
        if isinstance(row, Writer):
            busy = await session.scalar(
                select(Mission.id)
                .where(Mission.writer_id == service_id, Mission.status == MissionStatus.RUNNING)
                .limit(1)
            )
            if busy is not None:
                raise Conflict(f"writer {service_id} is storing mission {busy}")
        audit.record(session, _ENTITY[model], [service_id], "deleted", {"name": row.name})
        await session.delete(row)


@dataclass(frozen=True, slots=True)
class ConnectionTest:
    ok: bool
    detail: str


async def _probe(settings: Settings, box: SecretBox, row: WorkerService | Writer) -> ConnectionTest:
    async with http_client(settings.mission_http_timeout_seconds) as http:
        key, limit = box.decrypt(row.api_key), settings.mission_max_response_bytes
        try:
            if isinstance(row, WorkerService):
                status = await WorkerServiceAPI(http, row.url, key, limit).session_status()
                return ConnectionTest(True, f"reachable, API key accepted; session: {status}")
            writer = WriterAPI(http, row.url, key, limit)
            if not await writer.health():
                return ConnectionTest(False, "GET /health did not answer healthy")
            try:  # an unknown job: 404 means the key was accepted, 401 that it was not
                await writer.status("forager-connection-test")
            except ServiceError as exc:
                if exc.kind != "not_found":
                    raise
            return ConnectionTest(True, "healthy, API key accepted")
        except ServiceError as exc:
            if exc.status in (401, 403):
                return ConnectionTest(False, "the API key was refused")
            return ConnectionTest(False, exc.message)


async def test(
    db: Database, settings: Settings, box: SecretBox, model: type[Service], service_id: int
) -> ConnectionTest:
    """Call the service with its key now; the outcome is kept (``last_test_ok``)."""
    async with db.reader() as session:
        row = await get(session, model, service_id)
    result = await _probe(settings, box, row)
    async with db.session() as session:
        found = await session.get(model, service_id)
        if found is not None:
            found.last_test_at = utcnow()
            found.last_test_ok = result.ok
            audit.record(
                session,
                _ENTITY[model],
                [service_id],
                "tested",
                {"ok": result.ok, "detail": result.detail},
            )
    return result


async def services_with_proxies(
    session: AsyncSession, ids: list[int] | None = None
) -> list[tuple[WorkerService, str | None]]:
    """Worker services by id, each with the name of the proxy its session holds (seed §6.5)."""
    query = select(WorkerService).order_by(WorkerService.id)
    if ids is not None:
        query = query.where(WorkerService.id.in_(ids))
    services = list(await session.scalars(query))
    held = {
        p.in_use_by_worker_id: proxy_label(p)
        for p in await session.scalars(
            select(Proxy).where(Proxy.in_use_by_worker_id.in_([s.id for s in services]))
        )
    }
    return [(s, held.get(s.id)) for s in services]
