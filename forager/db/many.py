"""One statement run for many rows, on SQLite without SQLAlchemy's work per row.

SQLAlchemy's executemany builds each row's parameters anew: ``construct_params``, each
column's bind processor, a tuple in the statement's order (measured in a 3,000-page crawl:
~5 µs per event row, ~13 per task update, ~0.35 s of the event loop's ~3.3 s of CPU in all).
A ``Many`` compiles its statement once per set of row keys, the way SQLAlchemy would compile it
for an executemany, keeps the order and the processors, and turns each row into the driver's
tuple itself; the tuples go to the driver as one executemany (``exec_driver_sql``).

PostgreSQL's statements go through SQLAlchemy as before: its multi-row inserts are rendered by
insertmanyvalues, and the task updates are one ``unnest`` statement already. A statement this
path cannot run as it is (a Python-side default or ``onupdate``, an expanding or escaped
parameter) goes through SQLAlchemy too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import Dialect
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler

Row = dict[str, Any]
# The driver's SQL and a row -> parameters tuple; None: SQLAlchemy runs the statement.
_Plan = tuple[str, Callable[[Row], tuple[Any, ...]]] | None


class Many:
    """``statement`` (a Core insert or update) run for many rows (dicts with the same keys)."""

    __slots__ = ("_plans", "statement")

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._plans: dict[tuple[str, ...], _Plan] = {}  # SQLite's, by the rows' keys

    async def execute(self, session: AsyncSession, rows: Sequence[Row]) -> None:
        """Run the statement for every row of ``rows``, in the session's transaction."""
        if not rows:
            return
        dialect = session.get_bind().dialect
        plan = None
        if dialect.name == "sqlite":
            keys = tuple(rows[0])
            plan = self._plans[keys] if keys in self._plans else self._plan(dialect, keys)
        if plan is None:
            await session.execute(self.statement, list(rows))
            return
        sql, parameters = plan
        connection = await session.connection()
        await connection.exec_driver_sql(sql, [parameters(row) for row in rows])

    def _plan(self, dialect: Dialect, keys: tuple[str, ...]) -> _Plan:
        compiled = self.statement.compile(  # type: ignore[attr-defined]
            dialect=dialect, column_keys=list(keys), for_executemany=True
        )
        plan = _positional(compiled, keys) if isinstance(compiled, SQLCompiler) else None
        self._plans[keys] = plan
        return plan


def _positional(compiled: SQLCompiler, keys: tuple[str, ...]) -> _Plan:
    """The SQL and the tuple maker for rows with ``keys``, or None if the statement needs more
    than its rows' values and its processors (what SQLAlchemy's ``construct_params`` adds)."""
    order = compiled.positiontup
    if (
        order is None
        or compiled.insert_prefetch
        or compiled.update_prefetch
        or compiled.literal_execute_params
        or compiled.post_compile_params
        or compiled.escaped_bind_names
    ):
        return None
    constants: dict[str, Any] = {}
    for name in order:
        if name not in keys:  # a value fixed in the statement
            bind = compiled.binds[name]
            if bind.required or bind.callable is not None:
                return None
            constants[name] = bind.value
    processors = compiled._bind_processors
    steps: list[tuple[int, Callable[[Any], Any]]] = []
    for i, name in enumerate(order):
        process = processors.get(name)
        if process is not None and not callable(process):  # a tuple type's processors
            return None
        if process is not None:
            steps.append((i, process))
    inserts = [(i, constants[name]) for i, name in enumerate(order) if name in constants]
    picked = [name for name in order if name not in constants]
    if not picked:
        return None
    pick: Callable[[Row], Any]
    if len(picked) == 1:
        only = picked[0]
        pick = lambda row: (row[only],)  # noqa: E731
    else:
        pick = itemgetter(*picked)
    if not steps and not inserts:
        return compiled.string, pick

    def parameters(row: Row) -> tuple[Any, ...]:
        values = list(pick(row))
        for i, value in inserts:  # in ascending order: each lands at its own place
            values.insert(i, value)
        for i, process in steps:
            values[i] = process(values[i])
        return tuple(values)

    return compiled.string, parameters
