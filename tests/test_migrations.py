"""Migrations: an empty database upgrades to a schema that matches the models and every
downgrade takes it back to empty, on both engines; `forager db downgrade`."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.exc import DBAPIError

from forager import runtime
from forager.config import Settings
from forager.db import migrate, revisions
from forager.db.engine import Database
from forager.db.listen import asyncpg_dsn
from forager.db.migrate import current_revision, head_revision, schema_drift, upgrade
from forager.db.models import Base
from forager.errors import ConfigError
from forager.queue.submit import SubmitSpec, submit_urls
from forager.runtime import open_database
from tests.support.cli import forager


async def test_upgrade_from_empty_matches_models(db_url: str, tmp_path: Path) -> None:
    """Up from empty (twice: the second a no-op) to the models' schema, down to empty one
    migration at a time, and up again."""
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
        # Seed 001's rollback: every migration's downgrade in turn, newest first, down to an
        # empty database, then up to head again.
        steps = [
            r.revision
            for r in ScriptDirectory.from_config(migrate.alembic_config()).walk_revisions()
        ]
        left_at: list[str | None] = []
        await migrate.downgrade(db, "base", on_step=left_at.append)
        assert left_at == [*steps[1:], None]
        assert await current_revision(db) is None
        async with db.engine.connect() as conn:
            left = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
        assert left <= {"alembic_version"}, left
        await upgrade(db)
        assert await current_revision(db) == head_revision()
    finally:
        await db.dispose()


async def test_a_connection_cut_while_migrating_is_tried_again(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker starting while the database ends its sessions (a restart, the chaos test's
    cut) migrates again instead of exiting; any other database error still stops start-up."""
    calls: list[str] = []

    async def cut_once(db: Database) -> None:
        calls.append("upgrade")
        if len(calls) == 1:
            raise DBAPIError(
                "BEGIN", {}, Exception("terminating connection"), connection_invalidated=True
            )
        await upgrade(db)

    monkeypatch.setattr(migrate, "upgrade", cut_once)
    monkeypatch.setattr(runtime, "at_head", _never_at_head)  # the database may be at head
    db = await open_database(settings)
    try:
        assert calls == ["upgrade", "upgrade"]
        assert await current_revision(db) == head_revision()
    finally:
        await db.dispose()

    async def refused(db: Database) -> None:
        calls.append("refused")
        raise DBAPIError("BEGIN", {}, Exception("permission denied"))

    monkeypatch.setattr(migrate, "upgrade", refused)
    with pytest.raises(ConfigError, match="cannot use the database"):
        await open_database(settings)
    assert calls.count("refused") == 1


async def _never_at_head(_db: Database) -> bool:
    return False


def test_the_newest_revision_is_read_from_the_files_as_alembic_reads_it() -> None:
    assert revisions.head_revision() == head_revision()


async def test_a_database_at_the_newest_revision_opens_without_alembic(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One query says the schema is current (Alembic's import and script reading cost ~0.2 s
    of every process start); any other record, or none, goes through Alembic as before."""
    db = await open_database(settings)  # migrated, whatever it was
    upgrades: list[Database] = []

    async def counted(db: Database) -> None:
        upgrades.append(db)
        await upgrade(db)

    monkeypatch.setattr(migrate, "upgrade", counted)
    try:
        assert await revisions.at_head(db)
        await (await open_database(settings)).dispose()
        assert upgrades == []
        async with db.engine.begin() as conn:
            await conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'elsewhere'")
        assert not await revisions.at_head(db)
        async with db.engine.begin() as conn:
            await conn.exec_driver_sql(
                f"UPDATE alembic_version SET version_num = '{head_revision()}'"
            )
        assert await revisions.at_head(db)
    finally:
        await db.dispose()
    new = Database(f"sqlite+aiosqlite:///{tmp_path / 'new.db'}")
    try:
        assert not await revisions.at_head(new)  # no version table yet
    finally:
        await new.dispose()


def test_cli_db_downgrade(cli_env: dict[str, str], tmp_path: Path) -> None:
    missing = forager(tmp_path, cli_env, "db", "downgrade", "--steps", "1")
    assert missing.returncode != 0 and "forager db upgrade" in missing.stderr
    forager(tmp_path, cli_env, "db", "upgrade")
    below = [
        r.revision for r in ScriptDirectory.from_config(migrate.alembic_config()).walk_revisions()
    ][1]
    done = forager(tmp_path, cli_env, "db", "downgrade", "--steps", "1")
    assert done.returncode == 0 and f"database at revision {below} " in done.stdout
    bad = forager(tmp_path, cli_env, "db", "downgrade", "nonsense")
    assert bad.returncode != 0 and "cannot downgrade to 'nonsense'" in bad.stderr


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_an_index_built_concurrently_beforehand_is_kept(
    db_url: str, db: Database, settings: Settings
) -> None:
    """docs/DEPLOY.md's large-database upgrade: the claim index built by hand with ``CREATE
    INDEX CONCURRENTLY`` before ``forager db upgrade`` is found by migration 0036, and an invalid
    one a failed concurrent build left behind is dropped and built again."""
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        await migrate.downgrade(db, "0035")
        await submit_urls(db, settings, [SubmitSpec(f"https://shop.example/{p}") for p in "ab"])
        # A concurrent build that fails (two tasks share a domain) leaves an invalid index.
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY ix_crawl_tasks_domain_due"
                " ON crawl_tasks (domain_id)"
            )
        await upgrade(db)
        assert await schema_drift(db) == []
        assert await conn.fetchval(_VALID, "ix_crawl_tasks_domain_due") is True
        # Built by hand beforehand: the upgrade keeps that index (same object, not rebuilt).
        await migrate.downgrade(db, "0035")
        await conn.execute(
            "CREATE INDEX CONCURRENTLY ix_crawl_tasks_domain_due"
            " ON crawl_tasks (domain_id, status, priority, scheduled_at, id)"
        )
        built = await conn.fetchval(_OID, "ix_crawl_tasks_domain_due")
        await upgrade(db)
        assert await conn.fetchval(_OID, "ix_crawl_tasks_domain_due") == built
        assert await schema_drift(db) == []
    finally:
        await conn.close()


_VALID = (
    "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
    " WHERE c.relname = $1"
)
_OID = "SELECT oid FROM pg_class WHERE relname = $1"
