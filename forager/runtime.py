"""Start-up shared by every command: settings → logging → database (migrated)."""

from __future__ import annotations

import logging

from forager.config import Settings
from forager.db.engine import Database
from forager.db.migrate import upgrade


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    # httpx logs every request line at INFO: too loud for a crawler.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)


async def open_database(settings: Settings, *, migrate: bool = True) -> Database:
    """Connect and, unless told otherwise, bring the schema up to date."""
    db = Database(settings.resolved_database_url)
    if migrate:
        try:
            await upgrade(db)
        except BaseException:
            await db.dispose()
            raise
    return db
