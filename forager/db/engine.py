"""Engines and sessions. SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` for writers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from forager.db import audit
from forager.db.sqlite_adapter import OneTripDBAPI

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_engine(url: str, begin: str) -> AsyncEngine:
    engine = create_async_engine(  # aiosqlite: the one async SQLite driver (config checks it)
        url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, module=OneTripDBAPI()
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from the driver so BEGIN is ours to choose.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Writers take the write lock up front: a deferred transaction that upgrades to a
        # writer cannot wait on busy_timeout and fails with "database is locked" instead.
        conn.exec_driver_sql(begin)

    return engine


def database_label(url: str) -> str:
    """Where a database is, without credentials (safe to print and log)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return str(parsed.database)
    return parsed._replace(username=None, password=None).render_as_string()


class Database:
    """The two ways in: ``session()`` for work that writes, ``reader()`` for read-only work.

    On PostgreSQL both use one pool (``pool_size`` connections kept, ``max_overflow`` more
    on demand, ``pool_timeout`` seconds to wait for one). On SQLite writers serialize on
    ``BEGIN IMMEDIATE`` while readers run beside them under WAL.
    """

    def __init__(
        self, url: str, *, pool_size: int = 10, max_overflow: int = 20, pool_timeout: float = 30.0
    ) -> None:
        self.url = url
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            self.engine = _sqlite_engine(url, "BEGIN IMMEDIATE")
            self.read_engine = _sqlite_engine(url, "BEGIN")
        else:
            self.engine = create_async_engine(
                url,
                pool_size=pool_size,
                max_overflow=max_overflow,
                pool_timeout=pool_timeout,
                pool_pre_ping=True,
            )
            self.read_engine = self.engine
        self._writer = async_sessionmaker(self.engine, expire_on_commit=False)
        self._reader = async_sessionmaker(self.read_engine, expire_on_commit=False)

    @property
    def label(self) -> str:
        return database_label(self.url)

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A write transaction: committed on success, rolled back on any error."""
        async with self._writer() as session, session.begin():
            yield session
            await audit.flush(session)

    @asynccontextmanager
    async def reader(self) -> AsyncIterator[AsyncSession]:
        """A read-only transaction (one consistent snapshot)."""
        async with self._reader() as session, session.begin():
            yield session

    async def dispose(self) -> None:
        await self.engine.dispose()
        if self.read_engine is not self.engine:
            await self.read_engine.dispose()
