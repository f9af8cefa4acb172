"""``/metrics`` in Prometheus text format, read from the database so it covers every worker.

Labels name statuses, kinds and ids, never a host, port, worker host name or URL (the
endpoint is open). Task counts come from the trigger-kept counters (``forager.queue.counts``);
the attempt figures and the page store's size (stored pages and bytes: two aggregate passes
over ``crawl_attempts``; stored product images and bytes: one over ``product_images``) are
computed at most once per ``ATTEMPTS_TTL_SECONDS`` per process, however often the endpoint is
scraped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import uvicorn
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import PlainTextResponse
from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.api.deps import ReadSessionDep, RuntimeDep
from forager.config import Settings
from forager.db import breakers
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlJob, CrawlTask, Domain, Proxy
from forager.db.queries import count_by
from forager.db.types import utcnow
from forager.discovery import admin as crawl_jobs
from forager.monitors import admin as monitors
from forager.monitors.window import LATENCY_BUCKETS
from forager.products import images
from forager.queue import counts
from forager.retention.sizes import table_sizes

log = logging.getLogger(__name__)
router = APIRouter(tags=["monitoring"])

# Fetch latency buckets in seconds (Prometheus' default ladder, stretched to 30 s timeouts).
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ATTEMPTS_TTL_SECONDS = 15.0
TABLES_TTL_SECONDS = 60.0


def _label(value: object) -> str:
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(name: str, kind: str, help_text: str, samples: Iterable[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


@router.get(
    "/metrics",
    operation_id="metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}}},
)
async def metrics(
    request: Request, session: ReadSessionDep, runtime: RuntimeDep
) -> PlainTextResponse:
    """Tasks by status, attempts by outcome and error type, fetch latency, proxies, domains."""
    tasks = await counts.by_status(session)
    lines = _family(
        "forager_tasks",
        "gauge",
        "Tasks by current status.",
        (f'forager_tasks{{status="{_label(s)}"}} {n}' for s, n in tasks.items()),
    )
    cached: tuple[float, list[str]] | None = getattr(request.app.state, "metrics_attempts", None)
    if cached is None or time.monotonic() - cached[0] > ATTEMPTS_TTL_SECONDS:
        cached = (time.monotonic(), await _attempt_lines(session))
        request.app.state.metrics_attempts = cached
    lines += cached[1]
    for name, column, states in (
        ("forager_proxies", Proxy.is_active, ("active", "disabled")),
        ("forager_domains", Domain.is_active, ("active", "inactive")),
    ):
        by_state = await count_by(session, column)
        lines += _family(
            name,
            "gauge",
            f"{name.removeprefix('forager_').capitalize()} by state.",
            [
                f'{name}{{state="{states[0]}"}} {by_state.get(True, 0)}',
                f'{name}{{state="{states[1]}"}} {by_state.get(False, 0)}',
            ],
        )
    lines += await _breaker_lines(session, runtime.settings)
    lines += await _monitor_lines(session, runtime.settings)
    lines += await _job_lines(session)
    lines += await _table_lines(request, runtime.db)
    return PlainTextResponse(
        "\n".join(lines) + "\n", media_type="text/plain; version=0.0.4; charset=utf-8"
    )


async def _attempt_lines(session: AsyncSession) -> list[str]:
    """Attempts by phase, outcome and error type, and the fetch latency histogram."""
    attempts = await session.execute(
        select(
            CrawlAttempt.phase, CrawlAttempt.outcome, CrawlAttempt.error_type, func.count()
        ).group_by(CrawlAttempt.phase, CrawlAttempt.outcome, CrawlAttempt.error_type)
    )
    lines = _family(
        "forager_attempts_total",
        "counter",
        "Fetch and parse attempts by outcome and error type.",
        (
            f'forager_attempts_total{{phase="{_label(p)}",outcome="{_label(o)}",'
            f'error_type="{_label(e)}"}} {n}'
            for p, o, e, n in attempts
        ),
    )
    ms = CrawlAttempt.response_time_ms
    fetched = (CrawlAttempt.phase == "fetch") & ms.is_not(None)
    # Stored pages: one per fetch attempt that still points at one (retention clears it).
    stored = (CrawlAttempt.phase == "fetch") & CrawlAttempt.page_path.is_not(None)
    row = (
        await session.execute(
            select(
                *(func.sum(case((fetched & (ms <= b * 1000), 1), else_=0)) for b in BUCKETS),
                func.sum(case((fetched, 1), else_=0)),
                func.sum(case((fetched, ms), else_=0)),
                func.sum(case((stored, 1), else_=0)),
                func.sum(case((stored, CrawlAttempt.page_bytes), else_=0)),
            )
        )
    ).one()
    *bucket_counts, total, total_ms, pages, page_bytes = (int(v or 0) for v in row)
    lines += _family(
        "forager_stored_pages",
        "gauge",
        "Raw pages in the page store (one per fetch, until retention deletes it).",
        [f"forager_stored_pages {pages}"],
    )
    lines += _family(
        "forager_stored_page_bytes",
        "gauge",
        "Bytes of the stored pages (gzip, as stored).",
        [f"forager_stored_page_bytes {page_bytes}"],
    )
    image_count, image_bytes = await images.stored_totals(session)
    lines += _family(
        "forager_stored_images",
        "gauge",
        "Product images in the page store (each distinct image once, however many use it).",
        [f"forager_stored_images {image_count}"],
    )
    lines += _family(
        "forager_stored_image_bytes",
        "gauge",
        "Bytes of the stored product images.",
        [f"forager_stored_image_bytes {image_bytes}"],
    )
    return lines + _family(
        "forager_fetch_duration_seconds",
        "histogram",
        "Time to fetch a page (all redirects, whole body).",
        [
            *(
                f'forager_fetch_duration_seconds_bucket{{le="{b}"}} {c}'
                for b, c in zip(BUCKETS, bucket_counts, strict=True)
            ),
            f'forager_fetch_duration_seconds_bucket{{le="+Inf"}} {total}',
            f"forager_fetch_duration_seconds_sum {total_ms / 1000}",
            f"forager_fetch_duration_seconds_count {total}",
        ],
    )


class _TableCache:
    """The tables' rows and bytes: read once, then refreshed in the background when older than
    ``TABLES_TTL_SECONDS`` (a scrape is answered with the previous figures meanwhile)."""

    def __init__(self) -> None:
        self.lines: list[str] | None = None
        self.at = 0.0
        self.refreshing: asyncio.Task[None] | None = None

    async def refresh(self, db: Database) -> None:
        async with db.reader() as session:
            sizes = await table_sizes(session)
        self.lines = [
            *_family(
                "forager_table_rows",
                "gauge",
                "Rows per table (PostgreSQL: the planner's estimate; SQLite: counted).",
                (f'forager_table_rows{{table="{_label(t.table)}"}} {t.rows}' for t in sizes),
            ),
            *_family(
                "forager_table_bytes",
                "gauge",
                "Bytes per table with its indexes (PostgreSQL: pg_total_relation_size; SQLite: "
                "dbstat pages).",
                (
                    f'forager_table_bytes{{table="{_label(t.table)}"}} {t.bytes}'
                    for t in sizes
                    if t.bytes is not None
                ),
            ),
        ]
        self.at = time.monotonic()

    async def refresh_quietly(self, db: Database) -> None:
        try:
            await self.refresh(db)
        except Exception:  # the previous figures stay; the next scrape tries again
            log.warning("could not read the tables' sizes", exc_info=True)
            self.at = time.monotonic()


async def _table_lines(request: Request, db: Database) -> list[str]:
    cache: _TableCache | None = getattr(request.app.state, "metrics_tables", None)
    if cache is None:
        cache = request.app.state.metrics_tables = _TableCache()
    if cache.lines is None:
        await cache.refresh(db)
    elif time.monotonic() - cache.at > TABLES_TTL_SECONDS and (
        cache.refreshing is None or cache.refreshing.done()
    ):
        cache.refreshing = asyncio.create_task(cache.refresh_quietly(db))
    return cache.lines or []


_BREAKER_CODES = {breakers.CLOSED: 0, breakers.OPEN: 1, breakers.HALF_OPEN: 2}


async def _job_lines(session: AsyncSession) -> list[str]:
    """Running and paused crawl jobs (ended ones drop out): tasks by status, links by fate."""
    active = select(CrawlJob.id).where(CrawlJob.status.in_(("running", "paused")))
    jobs = list(
        await session.execute(
            select(
                CrawlJob.id,
                CrawlJob.pages_queued,
                CrawlJob.links_seen,
                CrawlJob.links_refused,
                CrawlJob.max_pages,
            )
            .where(CrawlJob.id.in_(active))
            .order_by(CrawlJob.id)
        )
    )
    tasks = await session.execute(
        select(CrawlTask.job_id, CrawlTask.status, func.count())
        .where(CrawlTask.job_id.in_(active))
        .group_by(CrawlTask.job_id, CrawlTask.status)
        .order_by(CrawlTask.job_id, CrawlTask.status)
    )
    found = {j.id: await crawl_jobs.progress(session, j.id) for j in jobs}
    return [
        *_family(
            "forager_job_tasks",
            "gauge",
            "Tasks of each running or paused crawl job, by status.",
            (f'forager_job_tasks{{job="{j}",status="{_label(s)}"}} {n}' for j, s, n in tasks),
        ),
        *_family(
            "forager_job_links",
            "gauge",
            "Links of each running or paused crawl job: queued, seen (known ones too), refused.",
            (
                f'forager_job_links{{job="{j.id}",fate="{fate}"}} {n}'
                for j in jobs
                for fate, n in (
                    ("queued", j.pages_queued),
                    ("seen", j.links_seen),
                    ("refused", j.links_refused),
                )
            ),
        ),
        *_family(
            "forager_job_max_pages",
            "gauge",
            "The page budget of each running or paused crawl job (links queued stop there).",
            (f'forager_job_max_pages{{job="{j.id}"}} {j.max_pages}' for j in jobs),
        ),
        *_family(
            "forager_job_progress",
            "gauge",
            "Progress of each running or paused crawl job: its tasks discovered, queued, in "
            "flight, fetched, parsed (product pages), products stored and errors.",
            (
                f'forager_job_progress{{job="{j}",measure="{m}"}} {getattr(p, m)}'
                for j, p in found.items()
                for m in _PROGRESS
            ),
        ),
        *_family(
            "forager_job_depth_tasks",
            "gauge",
            "Tasks of each running or paused crawl job by depth: discovered, fetched, parsed, "
            "errors.",
            (
                f'forager_job_depth_tasks{{job="{j}",depth="{d}",measure="{m}"}} {n}'
                for j, p in found.items()
                for d, level in sorted(p.by_depth.items())
                for m, n in level.items()
            ),
        ),
    ]


_PROGRESS = ("discovered", "queued", "in_flight", "fetched", "parsed", "products", "errors")


async def _breaker_lines(session: AsyncSession, settings: Settings) -> list[str]:
    """Breakers by kind and state, and each tripped one by id (0 closed, 1 open, 2 half-open)."""
    tripped = await breakers.not_closed(session, settings)
    lines: list[str] = []
    for kind, model in (("domain", Domain), ("proxy", Proxy)):
        total = await session.scalar(select(func.count()).select_from(model)) or 0
        states = Counter(b.state for b in tripped if b.kind == kind)
        states[breakers.CLOSED] = total - sum(states.values())
        lines += (
            f'forager_circuit_breakers{{kind="{kind}",state="{state}"}} {states.get(state, 0)}'
            for state in breakers.STATES
        )
    return [
        *_family("forager_circuit_breakers", "gauge", "Circuit breakers by kind and state.", lines),
        *_family(
            "forager_circuit_breaker_state",
            "gauge",
            "Each breaker that is not closed, by kind and id: 1 open, 2 half-open.",
            (
                f'forager_circuit_breaker_state{{kind="{b.kind}",id="{b.entity_id}"}} '
                f"{_BREAKER_CODES[b.state]}"
                for b in tripped
            ),
        ),
    ]


async def _monitor_lines(session: AsyncSession, settings: Settings) -> list[str]:
    """Live monitors (issue 15), each labelled by its id only (never its URL or host)."""
    now = utcnow()
    rows = await monitors.all_monitors(session)
    running = [m for m in rows if monitors.is_running(m, now)]
    lines = _family(
        "forager_active_scrapers",
        "gauge",
        "Monitors a live process runs now.",
        [f"forager_active_scrapers {len(running)}"],
    )
    lines += _family(
        "forager_monitors",
        "gauge",
        "Monitors by state (running, stopped: enabled but not running, paused).",
        [
            f'forager_monitors{{state="running"}} {len(running)}',
            f'forager_monitors{{state="stopped"}} '
            f"{sum(1 for m in rows if m.enabled) - len(running)}",
            f'forager_monitors{{state="paused"}} {sum(1 for m in rows if not m.enabled)}',
        ],
    )
    per_monitor: list[tuple[str, str, str, list[tuple[int, float]]]] = [
        (
            "forager_monitor_updates_total",
            "counter",
            "Successful polls.",
            [(m.id, m.total_updates) for m in rows],
        ),
        (
            "forager_monitor_changes_total",
            "counter",
            "Polls that saw new data.",
            [(m.id, m.total_changes) for m in rows],
        ),
        (
            "forager_monitor_errors_total",
            "counter",
            "Failed polls and retries.",
            [(m.id, m.total_errors) for m in rows],
        ),
        (
            "forager_monitor_dropped_snapshots_total",
            "counter",
            "Changes dropped unwritten from a full result queue (oldest first).",
            [(m.id, m.dropped_snapshots) for m in rows],
        ),
        (
            "forager_monitor_restarts_total",
            "counter",
            "Runs restarted by the context's rules.",
            [(m.id, m.restarts) for m in rows],
        ),
        (
            "forager_monitor_consecutive_errors",
            "gauge",
            "Failed polls in a row (0 after a success).",
            [(m.id, m.consecutive_errors) for m in rows],
        ),
        (
            "forager_monitor_data_age_seconds",
            "gauge",
            "Age of the last successful poll.",
            [
                (m.id, (now - m.last_success_at).total_seconds())
                for m in rows
                if m.last_success_at is not None
            ],
        ),
        (
            "forager_monitor_interval_seconds",
            "gauge",
            "Current adaptive polling interval.",
            [(m.id, m.current_interval_seconds) for m in rows],
        ),
        (
            "forager_monitor_update_latency_seconds",
            "gauge",
            "Time of the last successful poll.",
            [(m.id, m.last_latency_ms / 1000) for m in rows if m.last_latency_ms is not None],
        ),
        (
            "forager_monitor_memory_bytes",
            "gauge",
            "Memory of the process tree running the monitor (RSS).",
            [(m.id, m.memory_bytes) for m in running if m.memory_bytes is not None],
        ),
        (
            "forager_monitor_breaker_state",
            "gauge",
            "0 closed, 1 open, 2 half-open.",
            [
                (
                    m.id,
                    _BREAKER_CODES[
                        breakers.effective_state(
                            m.breaker_state, m.breaker_opened_at, settings, now
                        )
                    ],
                )
                for m in rows
            ],
        ),
    ]
    for name, kind, help_text, values in per_monitor:
        lines += _family(
            name, kind, help_text, (f'{name}{{monitor="{i}"}} {_number(v)}' for i, v in values)
        )
    return lines + _latency_histogram(rows)


def _latency_histogram(rows: list[Any]) -> list[str]:
    """Successful polls of every monitor by latency, one histogram (the seed's)."""
    width = len(LATENCY_BUCKETS) + 1
    counts = [0] * width
    total_ms = 0
    for m in rows:
        if m.latency_buckets and len(m.latency_buckets) == width:
            counts = [a + b for a, b in zip(counts, m.latency_buckets, strict=True)]
            total_ms += m.latency_sum_ms or 0
    cumulative, running = [], 0
    for n in counts:
        running += n
        cumulative.append(running)
    name = "forager_monitor_poll_duration_seconds"
    return _family(
        name,
        "histogram",
        "Time of a monitor's successful poll (fetch and read), every monitor together.",
        [
            *(
                f'{name}_bucket{{le="{b}"}} {c}'
                for b, c in zip(LATENCY_BUCKETS, cumulative, strict=False)
            ),
            f'{name}_bucket{{le="+Inf"}} {cumulative[-1]}',
            f"{name}_sum {total_ms / 1000}",
            f"{name}_count {cumulative[-1]}",
        ],
    )


def _number(value: float) -> str:
    """Counters exactly (no exponent), gauges to the millisecond."""
    return str(value) if isinstance(value, int) else str(round(value, 3))


class _MetricsServer(uvicorn.Server):
    """A second server inside ``serve``: the outer one owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_separately(runtime: Any, host: str, port: int) -> tuple[Any, asyncio.Task[None]]:
    """``/metrics`` on its own port (``FORAGER_PROMETHEUS_PORT``): a small app sharing the
    process's runtime. Returns the server (``should_exit = True`` stops it) and its task."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    app.state.runtime = runtime
    app.include_router(router)
    server = _MetricsServer(
        uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    )
    task = asyncio.create_task(server.serve(), name="metrics server")
    while not server.started:
        if task.done():
            task.result()  # raises why it could not start (port taken …)
            raise OSError(f"the metrics server on port {port} stopped at once")
        await asyncio.sleep(0.02)
    return server, task
