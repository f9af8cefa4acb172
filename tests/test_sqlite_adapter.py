"""SQLite's driver adapter: one trip to aiosqlite's thread per statement, same results."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from forager.db.engine import Database


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'adapter.db'}")
    async with db.session() as session:
        await session.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE)"))
    yield db
    await db.dispose()


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call handed to an aiosqlite thread, by name."""
    seen: list[str] = []
    original = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(fn, "__name__", repr(fn)))
        return await original(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    return seen


async def test_a_write_transaction_makes_one_trip_per_statement(
    sqlite_db: Database, trips: list[str]
) -> None:
    async with sqlite_db.session() as session:  # the pool's connection is open already
        await session.execute(text("INSERT INTO t (name) VALUES ('a')"))
        rows = (await session.execute(text("SELECT id, name FROM t"))).all()
    assert [tuple(r) for r in rows] == [(1, "a")]
    # BEGIN IMMEDIATE, INSERT, SELECT, COMMIT; the pool's reset of a committed connection
    # makes no trip (aiosqlite's cursors took 3-4 trips a statement, plus that rollback).
    assert len(trips) == 4, trips


async def test_rows_counts_and_ids_come_back_as_sqlite3_gives_them(sqlite_db: Database) -> None:
    async with sqlite_db.session() as session:
        conn = await session.connection()
        inserted = await conn.exec_driver_sql("INSERT INTO t (name) VALUES (?)", ("x",))
        assert inserted.lastrowid == 1
        many = await conn.exec_driver_sql(
            "INSERT INTO t (name) VALUES (?)", [("y",), ("z",), ("w",)]
        )
        assert many.rowcount == 3
        updated = await conn.execute(text("UPDATE t SET name = name || '!' WHERE id > 2"))
        assert updated.rowcount == 2
        result = await conn.execute(text("SELECT id, name FROM t ORDER BY id"))
        assert list(result.keys()) == ["id", "name"]
        assert [tuple(r) for r in result] == [(1, "x"), (2, "y"), (3, "z!"), (4, "w!")]
        empty = await conn.execute(text("SELECT id FROM t WHERE id < 0"))
        assert empty.first() is None


async def _insert(db: Database, *names: str, then_fail: bool = False) -> None:
    async with db.session() as session:
        for name in names:
            await session.execute(text("INSERT INTO t (name) VALUES (:n)"), {"n": name})
        if then_fail:
            raise RuntimeError("the caller gives up")


async def test_a_failed_statement_rolls_its_transaction_back(sqlite_db: Database) -> None:
    await _insert(sqlite_db, "same")
    with pytest.raises(IntegrityError):
        await _insert(sqlite_db, "kept out", "same")
    with pytest.raises(RuntimeError):
        await _insert(sqlite_db, "also kept out", then_fail=True)
    async with sqlite_db.reader() as session:
        names = (await session.execute(text("SELECT name FROM t"))).scalars().all()
    assert names == ["same"]  # both transactions were rolled back; the connection still works


async def test_streamed_results_still_work(sqlite_db: Database, trips: list[str]) -> None:
    async with sqlite_db.session() as session:
        conn = await session.connection()
        await conn.exec_driver_sql(
            "INSERT INTO t (name) VALUES (?)", [(f"n{i}",) for i in range(250)]
        )
    async with sqlite_db.reader() as session:
        stream = await session.stream(text("SELECT name FROM t ORDER BY id"))
        names = [row.name async for row in stream]
    assert names == [f"n{i}" for i in range(250)]
    assert "cursor" in trips  # streamed through aiosqlite's own cursor, in chunks
