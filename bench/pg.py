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
