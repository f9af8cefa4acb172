"""Agents bench: tasks/s through 1, 10 and 50 home-network agents, and server memory per agent.

A real ``forager serve`` (no built-in workers, PostgreSQL) and the test site run in their own
processes on loopback; the agents are real ``AgentClient`` connections, spread over a few
"swarm" processes (one Python process per agent would measure process start-up on a 2-core
machine, not the server). For each agent count: connect the agents, read the server's RSS
before and after (memory per connected agent), submit the tasks, time them to completion.

    python -m bench.agents            # FORAGER_BENCH_AGENT_TASKS=600 by default
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import func, select

from bench.pg import pg_admin, scratch_url
from forager.agents.admin import create_agent
from forager.config import Settings, load_settings
from forager.db.engine import Database
from forager.db.models import Agent, CrawlTask
from forager.queue.submit import SubmitSpec, submit_urls
from forager.runtime import open_database
from tests.support.agents import ServeProcess
from tests.support.site import SiteProcess

ROOT = Path(__file__).resolve().parents[1]
TASKS = int(os.environ.get("FORAGER_BENCH_AGENT_TASKS", "600"))
AGENT_COUNTS = (1, 10, 50)
PER_AGENT_CONCURRENCY = 2
SWARMS = 4
HOSTS = [f"127.0.0.{n}" for n in range(1, 11)]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def _count(db: Database, *where: object) -> int:
    async with db.reader() as session:
        return int(await session.scalar(select(func.count()).where(*where)) or 0)  # type: ignore[arg-type]


async def _connected(db: Database, ids: list[int]) -> int:
    return await _count(db, Agent.id.in_(ids), Agent.status.in_(["connected", "busy"]))


def _swarms(url: str, tokens: list[str], tmp: Path) -> list[subprocess.Popen[bytes]]:
    groups = [tokens[i::SWARMS] for i in range(min(SWARMS, len(tokens)))]
    procs = []
    for n, group in enumerate(groups):
        path = tmp / f"tokens-{n}.json"
        path.write_text(json.dumps(group))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.agents", "swarm", url, str(path)],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=(tmp / f"swarm-{n}.log").open("wb"),
            )
        )
    return procs


async def _round(
    db: Database, settings: Settings, serve: ServeProcess, site: SiteProcess, n: int, tmp: Path
) -> dict[str, float]:
    agents = [await create_agent(db, f"bench-{n}-{i}") for i in range(n)]
    ids = [a.id for a, _ in agents]
    assert serve.proc is not None
    await asyncio.sleep(2)
    rss_before = _rss_mb(serve.proc.pid)
    swarms = _swarms(serve.url, [t for _, t in agents], tmp)
    try:
        while await _connected(db, ids) < n:
            await asyncio.sleep(0.2)
        await asyncio.sleep(2)  # let the connections settle before measuring
        rss_after = _rss_mb(serve.proc.pid)
        base = n * 10_000
        urls = [site.url(f"/product/{base + i}", host=HOSTS[i % len(HOSTS)]) for i in range(TASKS)]
        done_before = await _count(db, CrawlTask.status == "completed")
        started = time.perf_counter()
        await submit_urls(db, settings, [SubmitSpec(u, created_by="bench") for u in urls])
        while await _count(db, CrawlTask.status == "completed") < done_before + TASKS:
            await asyncio.sleep(0.1)
        seconds = time.perf_counter() - started
    finally:
        for proc in swarms:
            proc.send_signal(signal.SIGTERM)
        for proc in swarms:
            proc.wait(timeout=60)
    return {
        "agents": n,
        "tasks": TASKS,
        "seconds": round(seconds, 2),
        "tasks_per_s": round(TASKS / seconds, 1),
        "server_rss_mb_idle": round(rss_before, 1),
        "server_rss_mb_connected": round(rss_after, 1),
        "kb_per_agent": round((rss_after - rss_before) * 1024 / n, 1),
    }


async def main() -> list[dict[str, float]]:
    name = f"forager_bench_agents_{uuid.uuid4().hex[:8]}"
    await pg_admin(f'CREATE DATABASE "{name}"')
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="forager-bench-agents-") as tmp_dir:
            tmp = Path(tmp_dir)
            settings = load_settings(
                data_dir=tmp / "data",
                database_url=scratch_url(name),
                default_crawl_delay_seconds=0,
                default_max_concurrent_requests=256,
                poll_seconds=0.2,
                agent_heartbeat_seconds=5,
                agent_timeout_seconds=60,
                log_level="WARNING",
            )
            db = await open_database(settings)
            serve = ServeProcess(settings, tmp)
            with SiteProcess(HOSTS) as site:
                serve.start()
                try:
                    for n in AGENT_COUNTS:
                        results.append(await _round(db, settings, serve, site, n, tmp))
                        print(json.dumps(results[-1]), flush=True)
                finally:
                    serve.stop()
                    await db.dispose()
    finally:
        await pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return results


async def swarm(url: str, tokens: list[str]) -> None:
    """Run one AgentClient per token in this process until SIGTERM."""
    from forager.agents.client import AgentClient

    clients = [
        AgentClient(url, token, concurrency=PER_AGENT_CONCURRENCY, shutdown_seconds=10)
        for token in tokens
    ]
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lambda: [c.stop() for c in clients])
    await asyncio.gather(*(c.run() for c in clients))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", nargs="?", default="bench", choices=["bench", "swarm"])
    parser.add_argument("args", nargs="*")
    ns = parser.parse_args()
    if ns.mode == "swarm":
        asyncio.run(swarm(ns.args[0], json.loads(Path(ns.args[1]).read_text())))
    else:
        print(f"load before: {os.getloadavg()}", flush=True)
        out = asyncio.run(main())
        print(f"load after: {os.getloadavg()}", flush=True)
        results_dir = ROOT / "bench" / "results"
        results_dir.mkdir(exist_ok=True)
        (results_dir / "agents.json").write_text(json.dumps(out, indent=2))
