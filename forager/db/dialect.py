"""The few statements that differ between SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import FromClause


def insert_ignoring_conflicts(session: AsyncSession, table: FromClause, *, on: list[str]) -> Any:
    """``INSERT … ON CONFLICT (on) DO NOTHING`` in the session's dialect."""
    name = session.get_bind().dialect.name
    module: Any = postgresql if name == "postgresql" else sqlite
    return module.insert(table).on_conflict_do_nothing(index_elements=on)
