"""The benchmarks' PostgreSQL admin connection: create and drop their scratch databases."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager

PG_ADMIN = os.environ.get("FORAGER_BENCH_PG", "postgresql://postgres@127.0.0.1/test")


async def pg_admin(sql: str) -> None:
    """Run one statement on the admin database, outside any transaction (CREATE DATABASE)."""
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def scratch_url(name: str) -> str:
    """The asyncpg URL of database ``name`` on the admin server."""
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    return f"{base}/{name}"


@contextmanager
def scratch_database(name: str) -> Iterator[str]:
    """A fresh, empty database ``name`` (dropped first, dropped after); its asyncpg URL.

    For synchronous callers: each statement runs in its own event loop.
    """
    drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    asyncio.run(pg_admin(drop))
    asyncio.run(pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield scratch_url(name)
    finally:
        asyncio.run(pg_admin(drop))


class ServerCpu:
    """The CPU the machine's PostgreSQL server used from creation to ``seconds()``, for a run
    whose database is on this machine (Forager's own tree, in its cgroup, leaves it out).

    Every ``postgres`` process's own time, plus what the postmaster reaped of the processes
    that ended (its children's time: a backend of a closed connection), from ``/proc``: a
    backend that lived through the run counts once, whenever it started or ended. It counts
    whatever else the server did meanwhile (the bench's own progress query, autovacuum).
    None where no server process can be read (another machine, no ``/proc``).
    """

    def __init__(self) -> None:
        self._start = _server_ticks()

    def seconds(self) -> float | None:
        end = _server_ticks()
        if self._start is None or end is None:
            return None
        return (end - self._start) / os.sysconf("SC_CLK_TCK")


def _server_ticks() -> int | None:
    """Clock ticks of every ``postgres`` process, plus the postmaster's reaped children's."""
    stats: dict[int, list[str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as file:
                line = file.read()
        except OSError:  # ended meanwhile
            continue
        comm_end = line.rindex(")")
        if line[line.index("(") + 1 : comm_end] == "postgres":
            stats[int(entry.name)] = line[comm_end + 2 :].split()
    if not stats:
        return None
    # After the command: state, ppid, …; utime and stime are the 12th and 13th, the reaped
    # children's cutime and cstime the 14th and 15th.
    total = sum(int(f[11]) + int(f[12]) for f in stats.values())
    postmasters = [f for f in stats.values() if int(f[1]) not in stats]
    return total + sum(int(f[13]) + int(f[14]) for f in postmasters)
