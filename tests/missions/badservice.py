"""A worker service and writer in one, that behaves — until a test tells a route to answer
garbage, a 500, nothing at all, too much, or a hostile job id. For the fault tests only; the
reference services are what users run."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.support.site import _config, _Server, bind_sockets

AD = {"id": "fake-1", "page_name": "Fake", "media_type": "video", "language": "pt"}


class BadService:
    """``behave[route] = "garbage" | "500" | "hang" | "huge" | "no-session"``; ``job_ids``
    are answered in turn by ``POST /scrape`` (default ``job_1``, ``job_2``…)."""

    def __init__(self) -> None:
        self.behave: dict[str, str] = {}
        self.job_ids: list[str] = []
        self.calls: list[str] = []
        self.document: Any = {"ads": [AD]}  # what /storage/… serves
        self.ads_count = 1  # what a finished job says it found
        self.jobs = 0
        self.port = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._closing = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _answer(self, request: Request, route: str, ok: dict[str, Any]) -> Response:
        self.calls.append(route)
        how = self.behave.get(route, "ok")
        if how == "garbage":
            return PlainTextResponse("<html>surprise</html>")
        if how == "500":
            return PlainTextResponse("boom", status_code=500)
        if how == "huge":
            return JSONResponse({"status": "ready", "padding": "x" * 2_000_000})
        if how == "hang":
            await self._closing.wait()
        if how == "no-session":
            return JSONResponse({"detail": "no ready session"}, status_code=409)
        return JSONResponse(ok)

    async def session(self, request: Request) -> Response:
        route = f"{request.method} {request.url.path}"
        return await self._answer(request, route, {"status": "ready"})

    async def scrape(self, request: Request) -> Response:
        self.jobs += 1
        job = self.job_ids.pop(0) if self.job_ids else f"job_{self.jobs}"
        return await self._answer(request, "POST /scrape", {"job_id": job})

    async def job(self, request: Request) -> Response:
        done = {"status": "completed", "ads_count": self.ads_count, "progress_pct": 100}
        return await self._answer(request, "GET /scrape/{id}", done)

    async def cancel(self, request: Request) -> Response:
        return await self._answer(request, "POST /scrape/{id}/cancel", {"status": "cancelled"})

    async def storage(self, request: Request) -> Response:
        return JSONResponse(self.document)

    async def process(self, request: Request) -> Response:
        body = await request.json()
        return await self._answer(request, "POST /process", {"job_id": body["job_id"]})

    async def status(self, request: Request) -> Response:
        done = {
            "status": "completed",
            "progress": {"total": 1, "processed": 1, "success_count": 1, "failed_count": 0},
        }
        return await self._answer(request, "GET /status/{id}", done)

    async def health(self, request: Request) -> Response:
        return await self._answer(request, "GET /health", {"status": "healthy"})

    def __enter__(self) -> BadService:
        app = Starlette(
            routes=[
                Route("/session", self.session, methods=["POST", "DELETE"]),
                Route("/session/status", self.session),
                Route("/scrape", self.scrape, methods=["POST"]),
                Route("/scrape/{job}", self.job),
                Route("/scrape/{job}/cancel", self.cancel, methods=["POST"]),
                Route("/storage/{job}/{name}", self.storage),
                Route("/process", self.process, methods=["POST"]),
                Route("/status/{job}", self.status),
                Route("/health", self.health),
            ]
        )
        sockets = bind_sockets(["127.0.0.1"])
        self.port = sockets[0].getsockname()[1]
        ready = threading.Event()
        self._server = _Server(_config(app), self._closing, on_ready=ready.set)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=sockets)),  # type: ignore[union-attr]
            daemon=True,
        )
        self._thread.start()
        assert ready.wait(10), "the bad service did not start"
        self._sockets = sockets
        return self

    def __exit__(self, *_exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.request_exit()
        self._thread.join(10)
        for sock in self._sockets:
            sock.close()
