"""SQLite through aiosqlite with one hand-off to its thread per statement.

aiosqlite runs every call of the ``sqlite3`` module on a thread of its own, and SQLAlchemy's
adapter makes three or four calls of one statement (open a cursor, execute, fetch, close): as
many trips there and back, each waking the thread and then the event loop. Here a statement is
one trip: the thread opens the cursor, runs the statement, reads every row and closes it, and
hands back rows and description at once (a 3,000-page crawl: ~3,800 trips instead of ~9,100).

It also knows whether the connection is inside a transaction (the thread reports it after each
trip), so the rollback the connection pool does when a committed connection comes back costs
nothing. Server-side cursors (``stream()``) keep aiosqlite's own cursor; after one, the state is
unknown again and rollback makes its trip.
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Sequence
from typing import Any

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util.concurrency import await_

_Outcome = tuple[Any, list[Any], int, int | None, bool]


def _run(conn: sqlite3.Connection, many: bool, operation: str, parameters: Any) -> _Outcome:
    """On aiosqlite's thread: the whole statement, from cursor to rows."""
    cursor = conn.cursor()
    try:
        if many:
            cursor.executemany(operation, parameters)
        elif parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        return description, rows, cursor.rowcount, cursor.lastrowid, conn.in_transaction
    finally:
        cursor.close()


class _Cursor(AsyncAdapt_aiosqlite_cursor):
    __slots__ = ("_arraysize", "_description", "_lastrowid", "_rowcount")
    _awaitable_cursor_close = False  # nothing is left open on the thread

    def __init__(self, adapt_connection: Any) -> None:  # no trip to open a cursor
        self._adapt_connection = adapt_connection
        self._connection = adapt_connection._connection
        self._cursor = None  # type: ignore[assignment]
        self._soft_closed_memoized = {}  # type: ignore[assignment]
        self._rows = collections.deque()
        self._description: Any = None
        self._rowcount = -1
        self._lastrowid: int | None = None
        self._arraysize = 1

    @property
    def description(self) -> Any:
        return self._description

    @property
    def rowcount(self) -> int:
        return self._rowcount

    @property
    def lastrowid(self) -> int:
        return self._lastrowid  # type: ignore[return-value]

    @property
    def arraysize(self) -> int:
        return self._arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._arraysize = value

    def close(self) -> None:
        self._rows.clear()

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        try:
            await_(self._trip(False, operation, parameters))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    def executemany(self, operation: Any, seq_of_parameters: Sequence[Any]) -> Any:
        try:
            await_(self._trip(True, operation, seq_of_parameters))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    def setinputsizes(self, *inputsizes: Any) -> None:
        pass  # sqlite3 ignores them too

    async def _trip(self, many: bool, operation: str, parameters: Any) -> None:
        adapted: _Connection = self._adapt_connection  # type: ignore[assignment]
        connection = self._connection
        async with adapted._execute_mutex:
            adapted.in_transaction = None  # unknown while the statement runs (or if it fails)
            outcome: _Outcome = await connection._execute(
                _run, connection._conn, many, operation, parameters
            )
        self._description, rows, self._rowcount, self._lastrowid, adapted.in_transaction = outcome
        self._rows = collections.deque(rows)


class _Connection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ("in_transaction",)
    _cursor_cls = _Cursor

    def __init__(self, dbapi: Any, connection: Any) -> None:  # an aiosqlite.Connection
        super().__init__(dbapi, connection)
        # True / False as the thread last saw it; None: not known (a fresh connection, a
        # failed statement, a server-side cursor), so rollback asks the thread.
        self.in_transaction: bool | None = None

    def cursor(self, server_side: bool = False) -> Any:
        if server_side:
            self.in_transaction = None
        return super().cursor(server_side)

    def rollback(self) -> None:
        if self.in_transaction is False:
            return  # the pool's reset of a connection whose work was committed
        self.in_transaction = None
        super().rollback()
        self.in_transaction = False

    def commit(self) -> None:
        self.in_transaction = None
        super().commit()
        self.in_transaction = False


class OneTripDBAPI(AsyncAdapt_aiosqlite_dbapi):
    """aiosqlite as SQLAlchemy adapts it, with the connection above (``module=`` of an engine)."""

    def __init__(self) -> None:
        super().__init__(aiosqlite, sqlite3)

    def connect(self, *arg: Any, **kw: Any) -> _Connection:
        adapted = super().connect(*arg, **kw)
        return _Connection(self, adapted._connection)
