"""Proxy selection throughput: selections/s with 1,000 proxies across 2 processes on PostgreSQL.

Each strategy gets its own domain: ``lru`` and ``random`` over 1,000 mapped proxies, ``lru``
over the global pool (no mapping: pool rows are created on first use), and ``exclusive``
(lease, then release: two statements' worth of work per selection). Two worker processes run
``FORAGER_BENCH_SELECT_CONCURRENCY`` coroutines each for ``FORAGER_BENCH_SELECT_SECONDS``;
every selection is one real transaction through ``choose_proxy``.

    .venv/bin/python -m bench.proxy_selection          # PostgreSQL (FORAGER_BENCH_PG)
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.pg import pg_admin, scratch_url

PROXIES = int(os.environ.get("FORAGER_BENCH_PROXIES", "1000"))
PROCESSES = int(os.environ.get("FORAGER_BENCH_SELECT_PROCESSES", "2"))
CONCURRENCY = int(os.environ.get("FORAGER_BENCH_SELECT_CONCURRENCY", "8"))
SECONDS = float(os.environ.get("FORAGER_BENCH_SELECT_SECONDS", "10"))
DATABASE = "forager_bench_proxysel"
# (domain name, strategy, use_global_pool, mapped)
CASES = (
    ("lru.bench", "lru", False, True),
    ("random.bench", "random", False, True),
    ("pool.bench", "lru", True, False),
    ("exclusive.bench", "exclusive", False, True),
)


async def _prepare(url: str) -> dict[str, int]:
    from sqlalchemy import insert

    from forager.config import load_settings
    from forager.db.models import Domain, DomainProxy, Proxy
    from forager.runtime import open_database

    db = await open_database(load_settings(database_url=url))
    try:
        async with db.session() as session:
            ids = list(
                (
                    await session.execute(
                        insert(Proxy).returning(Proxy.id),
                        [
                            {
                                "proxy_url": f"10.{n // 65536}.{n // 256 % 256}.{n % 256}",
                                "proxy_port": 3128,
                                "proxy_protocol": "http",
                                "is_active": True,
                                "failure_count": 0,
                                "success_count": 0,
                                "max_requests_per_hour": 1000,
                                "retest_count": 0,
                                "breaker_state": "closed",
                                "breaker_failures": 0,
                                "breaker_successes": 0,
                            }
                            for n in range(PROXIES)
                        ],
                    )
                ).scalars()
            )
            domains: dict[str, int] = {}
            for name, strategy, pool, mapped in CASES:
                domain = Domain(
                    domain_name=name,
                    base_url=f"https://{name}",
                    parser_name="generic",
                    user_agent="bench",
                    proxy_strategy=strategy,
                    use_global_pool=pool,
                )
                session.add(domain)
                await session.flush()
                domains[name] = domain.id
                if mapped:
                    await session.execute(
                        insert(DomainProxy),
                        [{"domain_id": domain.id, "proxy_id": p, "source": "admin"} for p in ids],
                    )
        return domains
    finally:
        await db.dispose()


def _worker(
    url: str, domain_id: int, strategy: str, pool: bool, go: Any, start: Any, out: Any
) -> None:
    async def main() -> int:
        from sqlalchemy import text

        from forager.config import load_settings
        from forager.proxies.selection import (
            DomainPolicy,
            NoProxyAvailable,
            choose_proxy,
            release_proxy,
        )
        from forager.runtime import open_database

        settings = load_settings(database_url=url)
        db = await open_database(settings)
        policy = DomainPolicy(domain_id, strategy, pool)
        done = 0

        async def loop(n: int, begin: float) -> None:
            nonlocal done
            owner = f"{os.getpid()}:{n}"
            while time.time() < begin + SECONDS:
                try:
                    async with db.session() as session:
                        choice = await choose_proxy(session, policy, settings, None, owner=owner)
                except NoProxyAvailable:
                    continue
                if choice is not None and choice.lease_owner is not None:
                    async with db.session() as session:
                        await release_proxy(session, choice.proxy_id, choice.lease_owner)
                done += 1

        async with db.reader() as session:  # connected and imported before the clock starts
            await session.execute(text("SELECT 1"))
        out.put("ready")
        await asyncio.to_thread(go.wait)
        begin = start.value
        try:
            await asyncio.gather(*(loop(n, begin) for n in range(CONCURRENCY)))
        finally:
            await db.dispose()
        return done

    out.put(asyncio.run(main()))


def run_postgresql() -> dict[str, Any]:
    try:
        asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)'))
        asyncio.run(pg_admin(f'CREATE DATABASE "{DATABASE}"'))
    except Exception as exc:  # report and skip, like the other benchmarks
        return {"skipped": f"PostgreSQL unreachable: {exc}"}
    url = scratch_url(DATABASE)
    try:
        domains = asyncio.run(_prepare(url))
        context = multiprocessing.get_context("spawn")
        results: dict[str, Any] = {}
        for name, strategy, pool, _ in CASES:
            out = context.Queue()
            go = context.Event()
            start = context.Value("d", 0.0)
            procs = [
                context.Process(
                    target=_worker, args=(url, domains[name], strategy, pool, go, start, out)
                )
                for _ in range(PROCESSES)
            ]
            for proc in procs:
                proc.start()
            assert [out.get(timeout=120) for _ in procs] == ["ready"] * PROCESSES
            start.value = time.time()
            go.set()
            counts = [out.get(timeout=SECONDS + 120) for _ in procs]
            for proc in procs:
                proc.join(30)
            label = f"{strategy}{' (global pool)' if pool else ''}"
            results[label] = {
                "selections": sum(counts),
                "per_second": round(sum(counts) / SECONDS, 1),
                "per_process": counts,
            }
        return results
    finally:
        asyncio.run(pg_admin(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)'))


def main() -> None:
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"load before: {load}")
    print(
        f"proxy selection: {PROXIES} proxies, {PROCESSES} processes × {CONCURRENCY} "
        f"coroutines, {SECONDS:g} s per strategy, PostgreSQL"
    )
    results = run_postgresql()
    for label, row in results.items():
        if label == "skipped":
            print(f"  skipped: {row}")
        else:
            print(f"  {label:<22} {row['per_second']:>9.1f} selections/s  {row['per_process']}")
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    payload = {"load": load, "proxies": PROXIES, "processes": PROCESSES, "results": results}
    (out / "proxy_selection.json").write_text(json.dumps(payload, indent=2))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
