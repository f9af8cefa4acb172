"""The reference worker service: seed §9.1 on FastAPI, for ``forager worker-service``.

A session holds an HTTP client through the proxy it was given; it is ``ready`` once the target
site answered through that proxy. A scrape job runs the configured mission scraper with that
client, reports ``progress_pct`` as it pages, and writes ``{job_id}/{job_id}_results.json``
under the storage directory, served at ``/storage/…`` (open, like a public bucket: job ids are
random). With ``allow_faults`` a ``POST /faults`` call makes the next sessions or jobs misbehave
(stuck, hanging, failing…), which is how the orchestrator's fault handling is tested for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import httpx
from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field

from forager.missions.dataurl import is_safe_job_id
from forager.missions.reference.auth import protect
from forager.missions.reference.scraper import SCRAPERS, ScrapeFailed, Scraper

log = logging.getLogger(__name__)


class ProxySpec(BaseModel):
    server: str = Field(min_length=1, max_length=300)
    username: str | None = Field(None, max_length=200)
    password: str | None = Field(None, max_length=300)


class SessionRequest(BaseModel):
    force_refresh: bool = True
    proxy: ProxySpec | None = None


class DateRange(BaseModel):
    start: date
    end: date


class Filters(BaseModel):
    date_range: DateRange
    format: Literal["all", "video", "image"] = "all"
    sort_by: str = Field("qtd_ads", max_length=40)
    languages: list[str] = Field(default_factory=list, max_length=20)


class ScrapeRequest(BaseModel):
    filters: Filters
    options: dict[str, Any] = Field(default_factory=dict)


class Faults(BaseModel):
    """What the next sessions / jobs do wrong (testing aid, only with ``--allow-faults``)."""

    model_config = ConfigDict(extra="forbid")

    session: Literal["stuck", "hang", "disconnect"] | None = None
    session_times: int = Field(0, ge=0)
    job: Literal["fail", "cancel", "hang", "lose"] | None = None
    job_times: int = Field(0, ge=0)
    job_id: str | None = Field(None, max_length=200, description="Answer this job id instead.")
    job_delay: float = Field(0.0, ge=0, le=600, description="Seconds every job waits first.")

    def take(self, kind: Literal["session", "job"]) -> str | None:
        times = f"{kind}_times"
        if getattr(self, kind) is None or getattr(self, times) <= 0:
            return None
        setattr(self, times, getattr(self, times) - 1)
        return str(getattr(self, kind))


def proxy_url(spec: ProxySpec) -> str:
    server = spec.server if "://" in spec.server else f"http://{spec.server}"
    if not spec.username:
        return server
    scheme, _, rest = server.partition("://")
    auth = f"{quote(spec.username, safe='')}:{quote(spec.password or '', safe='')}@"
    return f"{scheme}://{auth}{rest}"


@dataclass
class Session:
    status: str
    client: httpx.AsyncClient
    task: asyncio.Task[None] | None = None
    jobs: list[str] = field(default_factory=list)


@dataclass
class Job:
    id: str
    status: str = "queued"
    ads_count: int = 0
    progress_pct: float = 0.0
    error: str | None = None
    task: asyncio.Task[None] | None = None


class WorkerService:
    """The service's state: at most one session, its jobs, and the faults asked for."""

    def __init__(self, target: str, storage: Path, scraper: Scraper, timeout: float) -> None:
        self.target = target.rstrip("/")
        self.storage = storage
        self.scraper = scraper
        self.timeout = timeout
        self.session: Session | None = None
        self.jobs: dict[str, Job] = {}
        self.faults = Faults()

    async def open(self, request: SessionRequest) -> None:
        await self.close()
        proxy = proxy_url(request.proxy) if request.proxy is not None else None
        client = httpx.AsyncClient(proxy=proxy, timeout=self.timeout, trust_env=False)
        session = Session("initializing", client)
        session.task = asyncio.create_task(self._connect(session))
        self.session = session

    async def _connect(self, session: Session) -> None:
        fault = self.faults.take("session")
        if fault == "hang":
            return  # stays initializing
        session.status = "connecting"
        try:
            answer = await session.client.get(f"{self.target}/robots.txt")
            ok = answer.status_code < 500
        except httpx.HTTPError:
            ok = False
        if not ok or fault == "disconnect":
            session.status = "disconnected"
            return
        session.status = "warming_up"
        await asyncio.sleep(0)
        session.status = "stuck" if fault == "stuck" else "ready"

    async def close(self) -> None:
        session, self.session = self.session, None
        if session is None:
            return
        if session.task is not None:
            session.task.cancel()
        for job_id in session.jobs:
            await self.cancel(job_id)
        await session.client.aclose()

    def start(self, request: ScrapeRequest) -> str:
        session = self.session
        if session is None or session.status != "ready":
            raise HTTPException(409, "no ready session")
        hostile = self.faults.job_id
        if hostile is not None:
            self.faults.job_id = None
            return hostile
        job = Job(f"scrape_{secrets.token_hex(4)}")
        self.jobs[job.id] = job
        session.jobs.append(job.id)
        job.task = asyncio.create_task(self._run(session, job, request))
        return job.id

    async def _run(self, session: Session, job: Job, request: ScrapeRequest) -> None:
        fault = self.faults.take("job")
        job.status = "running"

        async def progress(ads: int, pct: float) -> None:
            job.ads_count, job.progress_pct = ads, pct

        try:
            if fault == "hang":
                await asyncio.Event().wait()
            await asyncio.sleep(self.faults.job_delay)
            filters = request.filters.model_dump(mode="json")
            ads = await self.scraper.scrape(session.client, self.target, filters, progress)
        except httpx.HTTPError as exc:
            job.status, job.error = "failed", f"connection through the session failed: {exc!r}"
            session.status = "disconnected"
            return
        except ScrapeFailed as exc:
            job.status, job.error = "failed", str(exc)
            return
        if fault == "fail":
            job.status, job.error = "failed", "injected failure"
            return
        if fault == "cancel":
            job.status = "cancelled"
            return
        await asyncio.to_thread(self._store, job.id, filters, ads)
        job.ads_count, job.progress_pct = len(ads), 100.0
        job.status = "completed" if ads else "empty"
        if fault == "lose":
            del self.jobs[job.id]  # as if the service had restarted

    def _store(self, job_id: str, filters: dict[str, Any], ads: list[dict[str, Any]]) -> None:
        folder = self.storage / job_id
        folder.mkdir(parents=True, exist_ok=True)
        body = {"job_id": job_id, "filters": filters, "ads_count": len(ads), "ads": ads}
        tmp = folder / f".{job_id}.tmp"
        tmp.write_text(json.dumps(body, ensure_ascii=False))
        os.replace(tmp, folder / f"{job_id}_results.json")

    async def cancel(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise HTTPException(404, "no such job")
        if job.task is not None and not job.task.done():
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
            job.status = "cancelled"
        return job


def create_app(
    *,
    api_key: str,
    target: str,
    storage: Path,
    scraper: str = "ad-library",
    timeout: float = 30.0,
    allow_faults: bool = False,
) -> FastAPI:
    """The worker service app; every route but /health and /storage needs ``x-api-key``."""
    service = WorkerService(target, storage, SCRAPERS[scraper](), timeout)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        yield
        await service.close()

    app = FastAPI(title="Forager reference worker service", lifespan=lifespan)
    app.state.service = service
    protect(app, api_key, "/storage/")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.post("/session")
    async def create_session(body: SessionRequest) -> dict[str, str]:
        await service.open(body)
        return {"status": "initializing"}

    @app.get("/session/status")
    async def session_status() -> dict[str, str]:
        return {"status": service.session.status if service.session else "terminated"}

    @app.delete("/session")
    async def end_session() -> dict[str, str]:
        await service.close()
        return {"status": "terminated"}

    @app.post("/scrape")
    async def start_scrape(body: ScrapeRequest) -> dict[str, str]:
        return {"job_id": service.start(body)}

    @app.get("/scrape/{job_id}")
    async def job_status(job_id: str) -> dict[str, Any]:
        job = service.jobs.get(job_id)
        if job is None:
            raise HTTPException(404, "no such job")
        return {
            "status": job.status,
            "ads_count": job.ads_count,
            "progress_pct": job.progress_pct,
            "error": job.error,
        }

    @app.post("/scrape/{job_id}/cancel")
    async def cancel_job(job_id: str) -> dict[str, str]:
        return {"status": (await service.cancel(job_id)).status}

    @app.get("/storage/{job_id}/{name}")
    async def stored(job_id: str, name: str) -> FileResponse:
        path = storage / job_id / name
        if not is_safe_job_id(job_id) or name != f"{job_id}_results.json" or not path.is_file():
            raise HTTPException(404, "no such file")
        return FileResponse(path, media_type="application/json")

    if allow_faults:

        @app.post("/faults")
        async def set_faults(body: Faults) -> Faults:
            service.faults = body
            return body

    return app
