"""The reference writer: seed §9.2 on FastAPI, for ``forager writer-service``.

``POST /process`` checks the config against the allow-list at once (a table, schema, operation
or conflict key it does not take is a 400 naming it), then downloads the JSON (bounded),
takes ``json_path`` and upserts the items in batches. A batch that the database refuses is
retried item by item, so one bad item fails alone; failed items are reported with their index
and reason. Jobs live in memory: after a restart the writer answers 404 and the orchestrator
submits again (upserts make that harmless). A ``job_id`` sent twice returns the first job.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import httpx
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from forager.db.engine import Database
from forager.db.types import utcnow
from forager.missions.dataurl import is_safe_job_id
from forager.missions.reference.auth import protect
from forager.missions.reference.tables import MANAGED, AllowedTable, Refused

log = logging.getLogger(__name__)
FAILED_ITEMS_SHOWN = 100


class Config(BaseModel):
    table: str = Field(max_length=100)
    schema_: str = Field("public", alias="schema", max_length=100)
    operation: Literal["upsert"] = "upsert"
    conflict_key: str = Field("id", max_length=100)


class Source(BaseModel):
    type: Literal["url"] = "url"
    url: str = Field(max_length=2000)
    headers: dict[str, str] = Field(default_factory=dict)
    json_path: str = Field("", max_length=200)


class ProcessRequest(BaseModel):
    job_id: str | None = Field(None, max_length=100)
    config: Config
    source: Source


@dataclass
class WriterJob:
    id: str
    url: str
    table: AllowedTable
    key: str
    source: Source
    status: str = "processing"
    total: int = 0
    processed: int = 0
    success_count: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    created_at: datetime = field(default_factory=utcnow)
    started_at: datetime = field(default_factory=utcnow)
    completed_at: datetime | None = None

    def public(self) -> dict[str, Any]:
        return {
            "job_id": self.id,
            "status": self.status,
            "progress": {
                "total": self.total,
                "processed": self.processed,
                "success_count": self.success_count,
                "failed_count": len(self.failed),
            },
            "failed_items": self.failed[:FAILED_ITEMS_SHOWN],
            "error": self.error,
            "started_at": self.started_at.isoformat(),
            "completed_at": self.completed_at.isoformat() if self.completed_at else None,
        }


def take_path(document: Any, path: str) -> Any:
    """``a.b`` of a JSON document (empty: the document itself)."""
    for part in [p for p in path.split(".") if p]:
        if not isinstance(document, dict) or part not in document:
            raise Refused(f"json_path {path!r} is not in the document")
        document = document[part]
    return document


class TableWriter:
    def __init__(
        self, db: Database, tables: dict[str, AllowedTable], batch_size: int, max_bytes: int
    ) -> None:
        self.db = db
        self.tables = tables
        self.batch_size = batch_size
        self.max_bytes = max_bytes
        self.jobs: dict[str, WriterJob] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def submit(self, body: ProcessRequest) -> WriterJob:
        if body.job_id is not None:
            if not is_safe_job_id(body.job_id):
                raise HTTPException(400, "job_id: letters, digits, _ and - only")
            known = self.jobs.get(body.job_id)
            if known is not None:
                if known.url != body.source.url:
                    raise HTTPException(409, f"job {body.job_id} exists for another source")
                return known
        table = self.tables.get(body.config.table)
        if table is None:
            raise HTTPException(400, f"schema: table {body.config.table!r} is not allowed")
        if body.config.schema_ != "public":
            raise HTTPException(400, f"schema: schema {body.config.schema_!r} is not allowed")
        if body.config.conflict_key not in table.keys:
            raise HTTPException(
                400, f"schema: conflict_key {body.config.conflict_key!r} is not a unique column"
            )
        if not body.source.url.startswith(("http://", "https://")):
            raise HTTPException(400, "source.url must be http:// or https://")
        job_id = body.job_id or f"write_{utcnow():%Y%m%d%H%M%S%f}"
        job = WriterJob(job_id, body.source.url, table, body.config.conflict_key, body.source)
        self.jobs[job.id] = job
        task = asyncio.create_task(self._run(job))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return job

    async def _run(self, job: WriterJob) -> None:
        try:
            items = take_path(await self._download(job.source), job.source.json_path)
            if not isinstance(items, list):
                raise Refused(f"json_path {job.source.json_path!r} is not a list")
            job.total = len(items)
            for start in range(0, len(items), self.batch_size):
                await self._batch(job, start, items[start : start + self.batch_size])
        except (Refused, httpx.HTTPError, ValueError) as exc:
            job.status, job.error = "failed", str(exc)[:500] or type(exc).__name__
        else:
            if not job.failed:
                job.status = "completed"
            else:
                job.status = "partial" if job.success_count else "failed"
                job.error = None if job.success_count else "schema: no item could be stored"
        job.completed_at = utcnow()

    async def _download(self, source: Source) -> Any:
        body = bytearray()
        async with (
            httpx.AsyncClient(timeout=60, trust_env=False) as client,
            client.stream("GET", source.url, headers=source.headers) as answer,
        ):
            if answer.status_code != 200:
                raise Refused(f"the source answered HTTP {answer.status_code}")
            async for chunk in answer.aiter_bytes():
                body += chunk
                if len(body) > self.max_bytes:
                    raise Refused(f"the source is over {self.max_bytes} bytes")
        return json.loads(body)

    async def _batch(self, job: WriterJob, start: int, items: list[Any]) -> None:
        rows: list[tuple[int, dict[str, Any]]] = []
        for index, item in enumerate(items, start):
            try:
                rows.append((index, job.table.row(item)))
            except Refused as exc:
                job.failed.append({"index": index, "data": item, "error": str(exc)})
        if rows:
            try:
                await self._upsert(job, [r for _, r in rows])
                job.success_count += len(rows)
            except SQLAlchemyError:  # find the ones the database refuses, one by one
                for index, row in rows:
                    try:
                        await self._upsert(job, [row])
                        job.success_count += 1
                    except SQLAlchemyError as exc:
                        reason = str(getattr(exc, "orig", exc)).splitlines()[0][:300]
                        job.failed.append(
                            {"index": index, "data": items[index - start], "error": reason}
                        )
        job.processed = start + len(items)

    async def _upsert(self, job: WriterJob, rows: list[dict[str, Any]]) -> None:
        table = job.table.table
        now = utcnow()
        managed = {c: now for c in MANAGED if c in table.c}
        dialect: Any = postgresql if self.db.dialect == "postgresql" else sqlite
        insert = dialect.insert(table).values([{**row, **managed} for row in rows])
        changes = {c: insert.excluded[c] for c in rows[0] if c != job.key}
        if "updated_at" in table.c:
            changes["updated_at"] = now
        statement = insert.on_conflict_do_update(index_elements=[job.key], set_=changes)
        async with self.db.session() as session:
            await session.execute(statement)


def create_app(
    *,
    api_key: str,
    db: Database,
    tables: dict[str, AllowedTable],
    batch_size: int = 150,
    max_bytes: int = 64 * 1024 * 1024,
) -> FastAPI:
    """The writer app; every route but /health needs ``x-api-key``."""
    writer = TableWriter(db, tables, batch_size, max_bytes)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        yield
        for task in list(writer.tasks):
            task.cancel()
        await asyncio.gather(*writer.tasks, return_exceptions=True)
        await db.dispose()

    app = FastAPI(title="Forager reference writer", lifespan=lifespan)
    app.state.writer = writer
    protect(app, api_key)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.post("/process")
    async def process(body: ProcessRequest) -> dict[str, Any]:
        job = writer.submit(body)
        return {"job_id": job.id, "status": job.status, "created_at": job.created_at.isoformat()}

    @app.get("/status/{job_id}")
    async def status(job_id: str) -> dict[str, Any]:
        job = writer.jobs.get(job_id)
        if job is None:
            raise HTTPException(404, "no such job")
        return job.public()

    return app
