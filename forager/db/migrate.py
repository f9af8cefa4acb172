"""Schema migrations, run in-process so `serve` and `worker` upgrade on start-up."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

from forager.db.engine import Database
from forager.db.models import Base
from forager.db.search_schema import is_search_object

MIGRATIONS = Path(__file__).parent / "migrations"
# Any fixed number: serializes concurrent upgrades from several processes on PostgreSQL.
_PG_MIGRATION_LOCK = 0x466F7261
# Indexes only a migration creates, on PostgreSQL only: the models cannot declare them in a form
# SQLite accepts (``… DESC NULLS LAST``, migration 0038).
PG_ONLY_INDEXES = ("ix_products_price_desc", "ix_products_rating_desc")


def include_object(
    _object: Any, name: str | None, type_: str, _reflected: bool, _compare_to: Any
) -> bool:
    """Schema comparison skips the full-text search objects and the PostgreSQL-only indexes
    the models cannot declare."""
    if type_ == "index" and name in PG_ONLY_INDEXES:
        return False
    return not (type_ in ("table", "index", "column") and is_search_object(name))


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def upgrade(db: Database) -> None:
    """Bring the schema to the newest revision (a no-op when it is there already)."""

    def _upgrade(connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            connection.execute(text(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})"))
        command.upgrade(alembic_config(connection), "head")

    async with db.engine.begin() as conn:
        await conn.run_sync(_upgrade)


async def downgrade(
    db: Database, target: str, on_step: Callable[[str | None], None] | None = None
) -> None:
    """Take the schema back to revision ``target`` (``base``: empty; ``-1``: one step), running
    each newer migration's downgrade in turn, in one transaction; ``on_step`` is told the
    revision each step left."""

    def _downgrade(connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            connection.execute(text(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})"))
        cfg = alembic_config(connection)
        if on_step is not None:
            cfg.attributes["on_version_apply"] = lambda **kw: on_step(next(iter(kw["heads"]), None))
        command.downgrade(cfg, target)

    async with db.engine.begin() as conn:
        await conn.run_sync(_downgrade)


async def current_revision(db: Database) -> str | None:
    def _current(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with db.engine.connect() as conn:
        return await conn.run_sync(_current)


async def schema_drift(db: Database) -> list[Any]:
    """Differences between the migrated database and the models (empty when they match)."""

    def _compare(connection: Connection) -> list[Any]:
        ctx = MigrationContext.configure(
            connection, opts={"compare_type": True, "include_object": include_object}
        )
        return list(compare_metadata(ctx, Base.metadata))

    async with db.engine.connect() as conn:
        return await conn.run_sync(_compare)
