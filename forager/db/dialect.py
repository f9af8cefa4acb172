"""The few statements that differ between SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import FromClause


def insert_ignoring_conflicts(session: AsyncSession, table: FromClause, *, on: list[str]) -> Any:
    """``INSERT … ON CONFLICT (on) DO NOTHING`` in the session's dialect."""
    name = session.get_bind().dialect.name
    module: Any = postgresql if name == "postgresql" else sqlite
    return module.insert(table).on_conflict_do_nothing(index_elements=on)


def seconds_between(session: AsyncSession, start: Any, end: Any) -> Any:
    """SQL for ``end - start`` in seconds (a float), in the session's dialect."""
    from sqlalchemy import extract, func

    if session.get_bind().dialect.name == "postgresql":
        return extract("epoch", end - start)
    return (func.julianday(end) - func.julianday(start)) * 86400.0


async def notify(session: AsyncSession, channel: str) -> None:
    """``NOTIFY channel`` on PostgreSQL, delivered when the session's transaction commits (one
    per transaction however often it is called: PostgreSQL folds identical notifications);
    nothing on SQLite, whose processes learn of new work in-process or by polling."""
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": channel})
