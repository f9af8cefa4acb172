"""The dashboard's routes: the page shell, static files, login/logout, the stored-page viewer
and the live stream. Everything else the pages show comes from the ``/api`` routes.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, or_, select

from forager.api.auth import require_key
from forager.api.deps import MAX_ID, EntityId, ReadSessionDep, Runtime, RuntimeDep
from forager.api.sessions import COOKIE, LIFETIME_SECONDS, log_out, session_key, signer
from forager.apikeys import authenticate
from forager.db.models import ApiKey, CrawlTask, PriceHistory, Product
from forager.db.queries import get_or_not_found
from forager.errors import NotFound, PageStoreError, Unauthorized
from forager.web.live import Publisher

STATIC = Path(__file__).parent / "static"
PAGES = (
    "/",
    "/tasks",
    "/batches",
    "/submit",
    "/jobs",
    "/domains",
    "/proxies",
    "/products",
    "/items",
    "/feeds",  # scheduled exports (issue 35)
    "/agents",
    "/events",
)
MISSION_PAGES = ("/missions",)  # Mission Control (issue 16)
MONITOR_PAGES = ("/monitors",)  # live monitors (issue 15)
ALERT_PAGES = ("/alerts",)  # alert rules and deliveries (issue 17)
DETAIL_PAGES = (
    "/tasks/{item_id}",
    "/products/{item_id}",
    "/items/{item_id}",
    "/domains/{item_id}/parser",
)
# The shell and its scripts come only from this server; nothing is loaded from elsewhere.
SHELL_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'; object-src 'none'"
)
# A stored page: shown as text and layout only; no script, no request anywhere.
STORED_PAGE_CSP = (
    "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'"
)
STREAM_SECONDS = 300  # a stream ends now and then; EventSource reconnects at once
KEEPALIVE_SECONDS = 15.0

router = APIRouter(include_in_schema=False)
KeyDep = Annotated[ApiKey, Depends(require_key)]


class Login(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=200)


def _shell() -> FileResponse:
    return FileResponse(
        STATIC / "index.html",
        headers={
            "Content-Security-Policy": SHELL_CSP,
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )


async def shell() -> FileResponse:
    return _shell()


async def detail_shell(item_id: EntityId) -> FileResponse:
    return _shell()


for _path in (*PAGES, *MISSION_PAGES, *MONITOR_PAGES, *ALERT_PAGES, "/login"):
    router.add_api_route(_path, shell, methods=["GET"])
for _path in DETAIL_PAGES:
    router.add_api_route(_path, detail_shell, methods=["GET"])


def _has_agents(app: Any) -> bool:
    """Whether the agents API is part of this server (its routes are in the OpenAPI paths)."""
    found: bool | None = getattr(app.state, "dashboard_has_agents", None)
    if found is None:
        found = "/api/agents" in app.openapi().get("paths", {})
        app.state.dashboard_has_agents = found
    return found


def _who(request: Request, key: ApiKey, csrf: str) -> dict[str, Any]:
    return {
        "name": key.name,
        "role": key.role,
        "csrf_token": csrf,
        "features": {"agents": _has_agents(request.app)},
    }


@router.post("/ui/login")
async def login(body: Login, request: Request, runtime: RuntimeDep) -> JSONResponse:
    """Check an API key and start a session: a signed HttpOnly cookie, never the key."""
    key = await authenticate(runtime.db, body.key.strip())
    if key is None:
        raise Unauthorized("the API key is not valid (unknown or revoked)")
    sessions = signer(runtime)
    cookie, session = sessions.issue(key.id)
    response = JSONResponse(_who(request, key, sessions.csrf_token(session)))
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=LIFETIME_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/ui/logout")
async def logout(request: Request, runtime: RuntimeDep) -> JSONResponse:
    """End the session (CSRF-checked like every other change)."""
    _, session = await session_key(request, runtime, any_role=True)
    await log_out(runtime, session)
    response = JSONResponse({"logged_out": True})
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/ui/session")
async def current_session(request: Request, runtime: RuntimeDep) -> JSONResponse:
    """Who is logged in, their CSRF token, and which optional pages exist."""
    key, session = await session_key(request, runtime)
    response = JSONResponse(_who(request, key, signer(runtime).csrf_token(session)))
    response.headers["Cache-Control"] = "no-store"
    return response


@router.get("/ui/tasks/{task_id}/page")
async def stored_page(
    task_id: EntityId, _: KeyDep, session: ReadSessionDep, runtime: RuntimeDep
) -> HTMLResponse:
    """The task's stored page, sandboxed: no scripts run, nothing is fetched."""
    task = await get_or_not_found(session, CrawlTask, task_id, f"task {task_id} does not exist")
    if task.html_path is None:
        raise NotFound(f"task {task_id} has no stored page")
    try:
        body = await runtime.pages.get(task.html_path)
    except PageStoreError as exc:
        raise NotFound(f"the stored page of task {task_id} cannot be read") from exc
    return HTMLResponse(
        body.decode("utf-8", errors="replace"),
        headers={
            "Content-Security-Policy": STORED_PAGE_CSP,
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "SAMEORIGIN",
            "Cache-Control": "no-store",
            # Links in a stored page must not tell other sites where it was viewed.
            "Referrer-Policy": "no-referrer",
        },
    )


@router.get("/ui/tasks/{task_id}/product")
async def task_product(task_id: EntityId, _: KeyDep, session: ReadSessionDep) -> dict[str, Any]:
    """The id of the product extracted from the task's URL (``null`` when none yet)."""
    task = await get_or_not_found(session, CrawlTask, task_id, f"task {task_id} does not exist")
    found = await session.scalar(
        select(Product.id).where(
            or_(Product.crawl_task_id == task_id, Product.url_hash == task.url_hash)
        )
    )
    return {"product_id": found}


@router.get("/ui/products/previous-prices")
async def previous_prices(
    _: KeyDep,
    session: ReadSessionDep,
    ids: Annotated[str, Query(max_length=10_000, pattern=r"^[0-9,]+$")],
) -> dict[str, Any]:
    """For each product id, the price recorded before its latest one (for change arrows)."""
    wanted = sorted({int(i) for i in ids.split(",") if 0 < len(i) <= 19 and 0 < int(i) <= MAX_ID})[
        :500
    ]
    rank = (
        func.row_number()
        .over(
            partition_by=PriceHistory.product_id,
            order_by=(PriceHistory.recorded_at.desc(), PriceHistory.id.desc()),
        )
        .label("rank")
    )
    recent = (
        select(PriceHistory.product_id, PriceHistory.price, rank)
        .where(PriceHistory.product_id.in_(wanted))
        .subquery()
    )
    rows = await session.execute(
        select(recent.c.product_id, recent.c.price).where(recent.c.rank == 2)
    )
    return {"previous": {str(pid): None if p is None else str(p) for pid, p in rows}}


def publisher(runtime: Runtime) -> Publisher:
    """The process's one publisher (created with the first stream)."""
    found: Publisher | None = getattr(runtime, "_dashboard_publisher", None)
    if found is None:
        found = Publisher(runtime.db, runtime.settings)
        runtime._dashboard_publisher = found  # type: ignore[attr-defined]
        _end_streams_on_exit(found)
    return found


def _end_streams_on_exit(shared: Publisher) -> None:
    """End open streams on SIGTERM/SIGINT, then let the server's own handler run.

    uvicorn waits for every response to finish before it stops, and a stream never
    finishes by itself: without this, a dashboard left open would hold ``forager serve``
    on SIGTERM. Only possible in the main thread (where ``forager serve`` runs the app).
    """
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
            loop.call_soon_threadsafe(shared.close_streams)
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                signal.default_int_handler(signum, frame)

        signal.signal(sig, handler)


@router.get("/ui/events/stream")
async def live_stream(_: KeyDep, runtime: RuntimeDep) -> StreamingResponse:
    """Server-sent events: one ``snapshot`` per second from the shared publisher."""
    shared = publisher(runtime)

    async def events() -> AsyncIterator[str]:
        queue = shared.subscribe()
        loop = asyncio.get_running_loop()
        ends = loop.time() + STREAM_SECONDS
        closing = asyncio.ensure_future(shared.closing.wait())
        getting: asyncio.Future[str] | None = None
        try:
            yield "retry: 1000\n\n"
            while loop.time() < ends and not shared.closing.is_set():
                if getting is None:
                    getting = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait(
                    (getting, closing),
                    timeout=KEEPALIVE_SECONDS,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if getting not in done:
                    if not shared.closing.is_set():
                        yield ": keep-alive\n\n"
                    continue
                message, getting = getting.result(), None
                yield f"event: snapshot\ndata: {message}\n\n"
        finally:
            # A tab that closes cancels this generator inside asyncio.wait: the pending
            # queue.get() and closing.wait() are cancelled and awaited here, never left to be
            # garbage-collected ("Task was destroyed but it is pending!").
            shared.unsubscribe(queue)
            await _cancel(getting, closing)

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _cancel(*futures: asyncio.Future[Any] | None) -> None:
    """Cancel ``futures`` and wait until each has ended (the caller may itself be cancelled)."""
    pending = [f for f in futures if f is not None and not f.done()]
    for future in pending:
        future.cancel()
    if pending:
        await asyncio.shield(asyncio.gather(*pending, return_exceptions=True))


def install(app: FastAPI) -> None:
    """Serve the dashboard from ``app``: pages at ``/``, assets under ``/ui/static``."""
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="dashboard-static")
