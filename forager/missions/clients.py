"""The two HTTP APIs the orchestrator calls (seed §9.1 worker service, §9.2 writer).

Every answer is read up to ``mission_max_response_bytes`` and checked before use; anything
else becomes a ``ServiceError`` whose ``kind`` the callers map to the seed's codes:
``unreachable`` (no connection), ``timeout`` (no answer in time), ``status`` (an HTTP error),
``not_found`` (404: the service does not know the job), ``garbage`` (an answer that is not
what the API promises). API keys travel in ``x-api-key`` and are never logged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from forager.errors import ForagerError
from forager.missions.dataurl import is_safe_job_id
from forager.missions.states import JOB_STATUSES, WRITER_STATUSES

Kind = Literal["unreachable", "timeout", "status", "not_found", "garbage"]


class ServiceError(ForagerError):
    """A call to a worker service or writer that did not give a usable answer."""

    def __init__(self, kind: Kind, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


def http_client(timeout: float) -> httpx.AsyncClient:
    """The orchestrator's one connection pool: no environment proxies, no redirects."""
    return httpx.AsyncClient(timeout=timeout, trust_env=False, follow_redirects=False)


class ServiceClient:
    """JSON calls to one service, bounded in size and time."""

    def __init__(self, http: httpx.AsyncClient, base_url: str, api_key: str, max_bytes: int):
        self.http = http
        self.base_url = base_url.rstrip("/")
        self._headers = {"x-api-key": api_key, "accept": "application/json"}
        self.max_bytes = max_bytes

    async def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        url = self.base_url + path
        try:
            async with self.http.stream(method, url, json=body, headers=self._headers) as answer:
                data = await self._read(answer)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ServiceError("unreachable", f"cannot connect to {self.base_url}") from exc
        except httpx.TimeoutException as exc:
            raise ServiceError("timeout", f"{method} {path}: no answer in time") from exc
        except httpx.TransportError as exc:
            raise ServiceError("garbage", f"{method} {path}: broken answer") from exc
        if answer.status_code == 404:
            raise ServiceError("not_found", f"{method} {path}: not found", 404)
        if not 200 <= answer.status_code < 300:
            raise ServiceError(
                "status", f"{method} {path}: HTTP {answer.status_code}", answer.status_code
            )
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ServiceError("garbage", f"{method} {path}: the answer is not a JSON object")
        return data

    async def _read(self, answer: httpx.Response) -> Any:
        body = bytearray()
        async for chunk in answer.aiter_bytes():
            body += chunk
            if len(body) > self.max_bytes:
                raise ServiceError("garbage", f"answer over {self.max_bytes} bytes")
        if not 200 <= answer.status_code < 300 or not body.strip():
            return None
        try:
            return json.loads(body)
        except ValueError as exc:
            raise ServiceError("garbage", "the answer is not JSON") from exc


def _int(data: dict[str, Any], name: str, default: int | None = 0) -> int | None:
    value = data.get(name, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ServiceError("garbage", f"{name} is not a count: {str(value)[:40]!r}")
    return value


@dataclass(frozen=True, slots=True)
class JobState:
    status: str
    ads_count: int
    progress_pct: float | None
    error: str | None


class WorkerServiceAPI(ServiceClient):
    """Seed §9.1."""

    async def create_session(self, proxy: dict[str, str | None]) -> None:
        await self.call("POST", "/session", {"force_refresh": True, "proxy": proxy})

    async def session_status(self) -> str:
        status = (await self.call("GET", "/session/status")).get("status")
        if not isinstance(status, str) or len(status) > 40:
            raise ServiceError("garbage", "the session status is not a status name")
        return status

    async def end_session(self) -> None:
        await self.call("DELETE", "/session")

    async def start_scrape(self, payload: dict[str, Any]) -> str:
        job_id = (await self.call("POST", "/scrape", payload)).get("job_id")
        if not isinstance(job_id, str) or not job_id:
            raise ServiceError("garbage", "the scrape answer has no job_id")
        return job_id  # checked by the caller: an unsafe id is a storage error (ERROR400)

    async def job(self, job_id: str) -> JobState:
        data = await self.call("GET", f"/scrape/{job_id}")
        status = data.get("status")
        if status not in JOB_STATUSES:
            raise ServiceError("garbage", f"unknown job status {str(status)[:40]!r}")
        progress = data.get("progress_pct")
        if progress is not None and (
            isinstance(progress, bool) or not isinstance(progress, int | float)
        ):
            raise ServiceError("garbage", "progress_pct is not a number")
        error = data.get("error")
        return JobState(
            str(status),
            _int(data, "ads_count") or 0,
            None if progress is None else max(0.0, min(100.0, float(progress))),
            error[:500] if isinstance(error, str) else None,
        )

    async def cancel_job(self, job_id: str) -> None:
        await self.call("POST", f"/scrape/{job_id}/cancel")


@dataclass(frozen=True, slots=True)
class WriterJob:
    status: str
    total: int
    processed: int
    success_count: int
    failed_count: int
    failed_items: list[Any] = field(default_factory=list)
    error: str | None = None


class WriterAPI(ServiceClient):
    """Seed §9.2."""

    async def process(self, job_id: str, data_url: str) -> str:
        body = {
            "job_id": job_id,
            "config": {
                "table": "ads",
                "schema": "public",
                "operation": "upsert",
                "conflict_key": "id",
            },
            "source": {"type": "url", "url": data_url, "json_path": "ads"},
        }
        accepted = (await self.call("POST", "/process", body)).get("job_id")
        if not is_safe_job_id(accepted):
            raise ServiceError("garbage", "the writer answered an unusable job_id")
        return str(accepted)

    async def status(self, job_id: str) -> WriterJob:
        data = await self.call("GET", f"/status/{job_id}")
        status = data.get("status")
        if status not in WRITER_STATUSES:
            raise ServiceError("garbage", f"unknown writer status {str(status)[:40]!r}")
        progress = data.get("progress") or {}
        if not isinstance(progress, dict):
            raise ServiceError("garbage", "progress is not an object")
        items = data.get("failed_items") or []
        error = data.get("error")
        return WriterJob(
            str(status),
            _int(progress, "total") or 0,
            _int(progress, "processed") or 0,
            _int(progress, "success_count") or 0,
            _int(progress, "failed_count") or 0,
            items if isinstance(items, list) else [],
            error[:500] if isinstance(error, str) else None,
        )

    async def health(self) -> bool:
        return (await self.call("GET", "/health")).get("status") == "healthy"
