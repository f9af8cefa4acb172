"""Migrations: an empty database upgrades to a schema that matches the models, on both engines."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import inspect

from forager.db.engine import Database
from forager.db.migrate import current_revision, head_revision, schema_drift, upgrade
from forager.db.models import Base


async def test_upgrade_from_empty_matches_models(db_url: str, tmp_path: Path) -> None:
    db = Database(db_url)
    try:
        # The PostgreSQL fixture database is a migrated clone; start it from empty.
        async with db.engine.begin() as conn:
            await conn.run_sync(Base.metadata.drop_all)
            await conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        await upgrade(db)
        await upgrade(db)  # a second run is a no-op
        assert await current_revision(db) == head_revision()
        assert await schema_drift(db) == []
        async with db.engine.connect() as conn:
            tables = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
        assert set(Base.metadata.tables) <= tables
    finally:
        await db.dispose()
