"""The reference writer's allow-list: which tables it may write, their columns, and how a JSON
value becomes a column value. Anything outside (a table, a column, a value the column cannot
hold) is refused by name — never passed to SQL.

Tables are reflected from the writer's database at start-up, so an operator can allow a table
of their own; ``created_at`` / ``updated_at`` are set by the writer, not by the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from forager.errors import ForagerError

MANAGED = frozenset({"created_at", "updated_at"})


class Refused(ForagerError, ValueError):
    """A value, column or table the allow-list does not take.

    Still a ``ValueError``, as before it joined the tree: the ``except ValueError`` clauses
    (``coerce``'s, the writer's job loop) catch it as they did."""


@dataclass(frozen=True)
class AllowedTable:
    table: sa.Table
    keys: frozenset[str]  # columns that may serve as the conflict key (primary or unique)

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def writable(self) -> list[str]:
        return [c.name for c in self.table.columns if c.name not in MANAGED]

    def row(self, item: Any) -> dict[str, Any]:
        """``item`` as column values; ``Refused`` naming the first thing that does not fit."""
        if not isinstance(item, dict):
            raise Refused("the item is not a JSON object")
        unknown = sorted(set(item) - set(self.writable))
        if unknown:
            raise Refused(f"column {unknown[0]!r} is not allowed in {self.name}")
        return {name: coerce(self.table.c[name], item.get(name)) for name in self.writable}


def coerce(column: sa.Column[Any], value: Any) -> Any:
    """The JSON ``value`` as ``column`` holds it, or ``Refused`` saying why not."""
    if value is None:
        if not column.nullable:
            raise Refused(f"{column.name}: may not be null")
        return None
    kind = column.type
    try:
        if isinstance(kind, sa.Boolean):
            if not isinstance(value, bool):
                raise Refused(f"{column.name}: not true or false")
            return value
        if isinstance(kind, sa.Integer):
            if isinstance(value, bool) or not isinstance(value, int):
                raise Refused(f"{column.name}: not an integer: {str(value)[:40]!r}")
            return value
        if isinstance(kind, sa.Numeric | sa.Float):
            return Decimal(str(value)) if isinstance(kind, sa.Numeric) else float(value)
        if isinstance(kind, sa.DateTime):
            return datetime.fromisoformat(str(value))
        if isinstance(kind, sa.Date):
            return date.fromisoformat(str(value))
        if isinstance(kind, sa.JSON):
            return value
        if isinstance(kind, sa.String):
            text = value if isinstance(value, str) else str(value)
            if kind.length is not None and len(text) > kind.length:
                raise Refused(f"{column.name}: longer than {kind.length} characters")
            if "\x00" in text:
                raise Refused(f"{column.name}: NUL characters are not stored")
            return text
    except (ValueError, TypeError, InvalidOperation) as exc:
        if isinstance(exc, Refused):
            raise
        raise Refused(f"{column.name}: {str(value)[:40]!r} is not a {kind}") from exc
    raise Refused(f"{column.name}: a column type the writer does not handle ({kind})")


async def reflect(engine: AsyncEngine, names: list[str]) -> dict[str, AllowedTable]:
    """The allowed tables as the database has them; a missing one stops the start."""

    def load(connection: sa.Connection) -> dict[str, AllowedTable]:
        inspector = sa.inspect(connection)
        found = {}
        for name in names:
            if not inspector.has_table(name):
                raise Refused(f"table {name!r} does not exist in the writer's database")
            table = sa.Table(name, sa.MetaData(), autoload_with=connection)
            keys = {c.name for c in table.primary_key.columns}
            for unique in inspector.get_unique_constraints(name):
                if len(unique["column_names"]) == 1:
                    keys.add(unique["column_names"][0])
            found[name] = AllowedTable(table, frozenset(keys))
        return found

    async with engine.connect() as connection:
        return await connection.run_sync(load)
