"""Start-up shared by every command: settings → logging → database (migrated)."""

from __future__ import annotations

import logging

from sqlalchemy.exc import DBAPIError

from forager.config import Settings
from forager.db.engine import Database
from forager.db.migrate import upgrade
from forager.errors import ConfigError


def configure_logging(settings: Settings, *, quiet: bool = False) -> None:
    """Log to stderr at the configured level (``quiet``: warnings and errors only)."""
    logging.basicConfig(
        level="WARNING" if quiet else settings.log_level.upper(),
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
        except (OSError, DBAPIError) as exc:
            await db.dispose()
            reason = getattr(exc, "orig", None) or exc
            raise ConfigError(f"cannot use the database {db.label}: {reason}") from exc
        except BaseException:
            await db.dispose()
            raise
    return db
