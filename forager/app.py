"""The FastAPI application: the API's routers and the dashboard, error translation, and the lifespan
of the built-in worker. It sits above both (``forager.web`` is built on the API's auth and
dependencies), so neither imports the other's way back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import Depends, FastAPI

from forager import __version__
from forager.api import agents as agents_api
from forager.api import alerts as alerts_api
from forager.api import (
    batches,
    domains,
    errors,
    events,
    health,
    items,
    metrics,
    openapi,
    parsers,
    products,
    progress,
    proxies,
    selector_parsers,
    sticky_sessions,
    tasks,
)
from forager.api import feeds as feeds_api
from forager.api import jobs as jobs_api
from forager.api import missions as missions_api
from forager.api import monitors as monitors_api
from forager.api.auth import ActorScope, require_key
from forager.api.limits import BodyLimit
from forager.config import Settings
from forager.queue import counts
from forager.runtime import Runtime
from forager.web.router import install as install_dashboard
from forager.worker.pool import new_worker_id


def create_app(settings: Settings) -> FastAPI:
    """The app for ``settings``: migrates on start, runs the scheduler and built-in workers."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = await Runtime.open(settings)
        # With serve_workers=0 the pool claims nothing but still runs the scheduler
        # (expired leases, due recrawls) for the external workers.
        pool = runtime.worker_pool(
            settings.serve_workers, worker_id=new_worker_id("serve"), kind="serve"
        )
        worker = asyncio.create_task(pool.run(), name="built-in worker")
        hub = runtime.agent_hub()  # home-network agents at /agents/ws
        hub.start()
        # Task counters: fold the triggers' deltas now and every few seconds (issue 14).
        fold_stop = asyncio.Event()
        folding = asyncio.create_task(
            counts.keep_folded(runtime.db, fold_stop), name="task counts fold"
        )
        app.state.runtime = runtime
        # Missions: stands by, and leads the orchestrator loop when this process holds its lease.
        missions = runtime.mission_runner()
        orchestrating = asyncio.create_task(missions.run(), name="mission runner")
        # Live monitors (issue 15) run with the built-in workers only (serve_workers > 0).
        monitors = (
            runtime.monitor_runner(pool.worker_id)
            if settings.serve_workers and settings.monitor_slots
            else None
        )
        app.state.monitors = monitors
        watching = asyncio.create_task(monitors.run(), name="monitor runner") if monitors else None
        # /metrics on its own port when FORAGER_PROMETHEUS_PORT is set (issue 15).
        separate = (
            await metrics.serve_separately(runtime, settings.host, settings.prometheus_port)
            if settings.prometheus_port
            else None
        )
        try:
            yield
        finally:
            if separate is not None:
                separate[0].should_exit = True
                await separate[1]
            if monitors is not None and watching is not None:
                monitors.stop()
                await watching
            missions.stop()
            await orchestrating
            fold_stop.set()
            await folding
            await hub.stop()
            pool.stop()
            await worker
            await runtime.aclose()

    app = FastAPI(
        title="Forager",
        version=__version__,
        description="Self-hosted scraping control plane: submit URLs, watch tasks, read products.",
        lifespan=lifespan,
    )
    errors.install(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(ActorScope)  # the API key named by require_key lives for one request
    # /health and /metrics are open; every /api route needs an API key.
    app.include_router(health.router)
    if not settings.prometheus_port:
        app.include_router(metrics.router)
    app.include_router(agents_api.ws_router)  # authenticates with the agent's token
    authenticated = [Depends(require_key)]
    for router in (
        health.stats_router,
        progress.router,
        tasks.router,
        products.router,
        items.router,
        domains.router,
        sticky_sessions.router,
        proxies.router,
        proxies.mappings,
        events.router,
        parsers.router,
        selector_parsers.router,
        agents_api.router,
        missions_api.router,
        missions_api.services,
        missions_api.writers,
        monitors_api.router,
        monitors_api.errors_router,
        alerts_api.router,
        jobs_api.router,
        feeds_api.router,
        batches.router,
    ):
        app.include_router(router, dependencies=authenticated)
    install_dashboard(app)  # the dashboard at / (its own login; /api stays as above)
    openapi.install(app)
    return app
