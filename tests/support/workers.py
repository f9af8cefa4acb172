"""Real ``forager worker`` processes on a test's database, and what the tests read about them."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil
from sqlalchemy import func, select, text

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlTask, Event, Product, Worker
from tests.support.waiting import completions, eventually


def start_worker(
    settings: Settings,
    log_dir: Path,
    name: str,
    concurrency: int,
    *,
    wrap: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``forager worker`` on the database of ``settings``; its output goes to ``<name>.log``.

    ``wrap`` prefixes the command (``ip netns exec NS``: it execs, so the pid is the worker's);
    ``extra_env`` adds or overrides settings (another host's database address, a page store).
    """
    args = ["worker", "--concurrency", str(concurrency)]
    return start_forager(settings, log_dir, name, args, wrap=wrap, extra_env=extra_env)


def start_forager(
    settings: Settings,
    log_dir: Path,
    name: str,
    args: Sequence[str],
    *,
    wrap: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``forager ARGS…`` (``worker``, ``relay``, ``celery-worker``) as ``start_worker`` runs it."""
    env = {
        **os.environ,
        "FORAGER_DATABASE_URL": settings.resolved_database_url,
        "FORAGER_DATA_DIR": str(settings.data_dir),
        "FORAGER_SECRET_KEY": settings.secret_key.get_secret_value() if settings.secret_key else "",
        "FORAGER_POLL_SECONDS": "0.05",
        "FORAGER_SCHEDULER_SECONDS": "0.5",
        "FORAGER_HEARTBEAT_SECONDS": str(settings.heartbeat_seconds),
        "FORAGER_LEASE_SECONDS": str(settings.lease_seconds),
        "FORAGER_FETCH_TIMEOUT_SECONDS": str(settings.fetch_timeout_seconds),
        "FORAGER_RETRY_BASE_SECONDS": "0.05",
        "FORAGER_RETRY_MAX_SECONDS": "0.5",
        "FORAGER_LOG_LEVEL": "WARNING",
        # How tasks reach the process (Celery dispatch: the relay and celery-workers).
        "FORAGER_DISPATCH": settings.dispatch,
        "FORAGER_CELERY_BROKER_URL": settings.celery_broker_url.get_secret_value(),
        "FORAGER_CELERY_QUEUE_PREFIX": settings.celery_queue_prefix,
        "FORAGER_CELERY_MAX_QUEUED": str(settings.celery_max_queued),
        **(extra_env or {}),
    }
    with (log_dir / f"{name}.log").open("ab") as log:  # the child keeps its own copy
        return subprocess.Popen(
            [*wrap, sys.executable, "-m", "forager.cli", *args],
            env=env,
            cwd=log_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def stop_worker(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM (a graceful stop), then its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise


def kill_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL: the worker gets no chance to give anything back."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


async def pause_worker(db: Database, proc: subprocess.Popen[bytes]) -> None:
    """SIGSTOP ``proc`` at a moment it has no database transaction open, so it holds nothing
    another process needs (SQLite's write lock, PostgreSQL's row locks) to take its tasks over:
    frozen inside one, the test would wait on the very process it stopped. Tried again until
    such a moment comes; ``resume_worker`` lets it go on."""

    async def stopped_outside_a_transaction() -> bool:
        os.kill(proc.pid, signal.SIGSTOP)
        await eventually(
            lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED,
            f"process {proc.pid} to stop",
            every=0.005,
        )
        # Twice, a moment apart: a statement sent just before the stop is still reaching the
        # server at the first look.
        for _ in range(2):
            if await _in_transaction(db, proc.pid):
                os.kill(proc.pid, signal.SIGCONT)
                return False
            await asyncio.sleep(0.05)
        return True

    await eventually(
        stopped_outside_a_transaction, f"worker {proc.pid} stopped between transactions"
    )


def resume_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGCONT: a stopped process runs on from where it was."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)


async def _in_transaction(db: Database, pid: int) -> bool:
    """Whether the process ``pid`` has a transaction open on ``db`` (or a statement running)."""
    if db.is_sqlite:
        # Only a writer can hold up the others (WAL: readers never block a writer); with the
        # process stopped, a write lock taken by anyone but this test is the process's own.
        with sqlite3.connect(str(db.engine.url.database), timeout=0) as check:
            try:
                check.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                return True
            check.rollback()
        return False
    server_port = db.engine.url.port or 5432
    ports = [
        c.laddr.port
        for c in psutil.Process(pid).net_connections("tcp")
        if c.raddr and c.raddr.port == server_port
    ]
    async with db.reader() as session:
        busy = await session.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND client_port = ANY(:ports) AND state <> 'idle'"
            ),
            {"ports": ports},
        )
    return bool(busy)


def logs(log_dir: Path) -> str:
    """The tail of every worker log in ``log_dir``, for a failure message."""
    return "\n".join(
        f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-40:])
        for p in sorted(log_dir.glob("*.log"))
    )


async def count_tasks(db: Database, *statuses: str) -> int:
    """How many tasks are in one of ``statuses``."""
    async with db.reader() as session:
        n = await session.scalar(
            select(func.count()).select_from(CrawlTask).where(CrawlTask.status.in_(statuses))
        )
        return int(n or 0)


async def leased_by(db: Database, proc: subprocess.Popen[bytes], kind: str = "worker") -> set[int]:
    """The tasks whose lease the process ``proc`` holds (its id is host:pid:kind:…)."""
    async with db.reader() as session:
        rows = await session.scalars(
            select(CrawlTask.id).where(CrawlTask.lease_owner.like(f"%:{proc.pid}:{kind}:%"))
        )
        return set(rows)


async def registered(db: Database, proc: subprocess.Popen[bytes], kind: str = "worker") -> bool:
    """Whether the worker process ``proc`` is up: its pool has reported itself."""
    async with db.reader() as session:
        n = await session.scalar(
            select(func.count())
            .select_from(Worker)
            .where(Worker.id.like(f"%:{proc.pid}:{kind}:%"), Worker.stopped_at.is_(None))
        )
        return bool(n)


async def all_up(
    db: Database,
    procs: Sequence[subprocess.Popen[bytes]],
    kind: str = "worker",
    *,
    timeout: float = 240,
    context: Callable[[], str] | None = None,
) -> None:
    """Wait until every process of ``procs`` is up (``registered``): work submitted after it
    finds them all claiming, not the first one up alone while another is still importing."""
    for proc in procs:
        await eventually(
            lambda proc=proc: registered(db, proc, kind),
            f"{kind} {proc.pid} to be up",
            timeout=timeout,
            context=context,
        )


async def assert_each_done_once(db: Database, ids: Sequence[int]) -> None:
    """Every task of ``ids`` completed exactly once — one ``completed`` event and one successful
    attempt each (a second success would be a result written twice; products are upserted by
    URL, so their count could not show it) — with its product, no lease left behind, and
    (the run killed something) leases that expired and were recovered."""
    done = await completions(db)
    assert set(done) == {str(i) for i in ids} and set(done.values()) == {1}
    async with db.reader() as session:
        successes = dict(
            (
                await session.execute(
                    select(CrawlAttempt.task_id, func.count())
                    .where(CrawlAttempt.outcome == "success")
                    .group_by(CrawlAttempt.task_id)
                )
            ).all()
        )
        products = await session.scalar(
            select(func.count(func.distinct(Product.crawl_task_id))).where(
                Product.crawl_task_id.in_(ids)
            )
        )
        leased = await session.scalar(
            select(func.count()).select_from(CrawlTask).where(CrawlTask.lease_owner.is_not(None))
        )
        expired = await session.scalar(
            select(func.count()).select_from(Event).where(Event.event == "lease_expired")
        )
    twice = {task: n for task, n in successes.items() if n != 1}
    assert not twice, f"tasks with more than one successful attempt: {twice}"
    assert set(successes) == set(ids)  # and none without one
    assert products == len(ids)  # every task left its product
    assert leased == 0
    assert expired and expired > 0  # the kills did strand leases, and they were recovered
