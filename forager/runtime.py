"""The composition root: settings → logging → database (migrated) → the shared parts.

Every command starts here; ``Runtime`` is the one place that builds what processes share.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import make_url, text
from sqlalchemy.exc import DBAPIError

from forager.alerts import completion, detect
from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.revisions import at_head
from forager.errors import ConfigError
from forager.fetch.base import Fetcher
from forager.parse import registry as parser_registry
from forager.store.pages import PageStore
from forager.worker.parts import Parts
from forager.worker.pool import WorkerPool

log = logging.getLogger(__name__)
_MIGRATE_TRIES = 5  # a cut connection while migrating is tried again this often

if TYPE_CHECKING:  # imported where they are built: `forager crawl` and workers need none
    from forager.agents.hub import AgentHub
    from forager.missions.runner import MissionRunner
    from forager.monitors.runner import MonitorRunner


class JsonFormatter(logging.Formatter):
    """One JSON object per record (``FORAGER_LOG_FORMAT=json``, the seed's structured logs)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(settings: Settings, *, quiet: bool = False) -> None:
    """Log to stderr at the configured level (``quiet``: warnings and errors only)."""
    level = settings.log_level.upper()
    level = "WARNING" if quiet or level == "WARN" else level
    if settings.log_format == "json":
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter())
        logging.basicConfig(level=level, handlers=[handler])
    else:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    # httpx logs every request line at INFO: too loud for a crawler.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # Apprise logs its URLs (credentials) at debug: kept out; failures are in the deliveries.
    apprise_log = logging.getLogger("apprise")
    apprise_log.propagate = False
    apprise_log.addHandler(logging.NullHandler())


# Where an operator command looked for the database and how to point it at the right one.
NO_DATABASE_HINT = (
    "point at the server's database with FORAGER_DATABASE_URL or FORAGER_DATA_DIR (read from "
    "the environment and ./.env), or run the command in the folder `forager serve` runs in; "
    "`forager db upgrade` creates a new database there"
)


async def open_database(
    settings: Settings, *, migrate: bool = True, create: bool = True
) -> Database:
    """Connect and, unless told otherwise, bring the schema up to date. Without ``create`` a
    database Forager never set up (no SQLite file, an empty PostgreSQL database) is refused
    before anything is written: an operator command run from the wrong folder must not make
    a new, empty database there and report success."""
    if not create:
        _refuse_missing_file(settings)
    db = Database(
        settings.resolved_database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout_seconds,
    )
    if not create and not await _has_schema(db):
        await db.dispose()
        raise ConfigError(f"no Forager database at {db.label}: {NO_DATABASE_HINT}")
    if migrate:
        try:
            await _migrate(db)
        except (OSError, DBAPIError) as exc:
            await db.dispose()
            reason = getattr(exc, "orig", None) or exc
            raise ConfigError(f"cannot use the database {db.label}: {reason}") from exc
        except BaseException:
            await db.dispose()
            raise
    return db


def _refuse_missing_file(settings: Settings) -> None:
    """A SQLite database that does not exist is refused before connecting would create it."""
    url = make_url(settings.resolved_database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return
    if not Path(url.database).exists():
        raise ConfigError(f"no Forager database at {url.database}: {NO_DATABASE_HINT}")


async def _has_schema(db: Database) -> bool:
    """Whether Forager's migrations ever ran here (the Alembic version table exists)."""
    try:
        async with db.read_engine.connect() as conn:
            await conn.execute(text("SELECT version_num FROM alembic_version"))
    except DBAPIError:  # no version table (or no such PostgreSQL database): never set up
        return False
    except OSError as exc:
        raise ConfigError(f"cannot use the database {db.label}: {exc}") from exc
    return True


async def _migrate(db: Database) -> None:
    """Migrate; a connection cut in the middle (a database restart, an administrator ending
    sessions) is tried again: the migration's transaction was rolled back with it. A database
    that cannot be reached at all fails at once."""
    if await at_head(db):  # one query instead of Alembic (~0.2 s of CPU per process start)
        return
    from forager.db.migrate import upgrade  # Alembic: 0.1 s to import, not always needed

    for attempt in range(1, _MIGRATE_TRIES + 1):
        try:
            await upgrade(db)
            return
        except DBAPIError as exc:
            if not exc.connection_invalidated or attempt == _MIGRATE_TRIES:
                raise
            log.warning("the database connection was cut while migrating (try %d); again", attempt)
            await asyncio.sleep(0.5 * attempt)


@dataclass
class Runtime:
    """The composition root: settings, database and the shared parts, built once per process.

    ``serve``'s lifespan, ``forager worker`` and ``forager crawl`` open one; routers receive it
    as a FastAPI dependency (``api.deps.RuntimeDep``) and never build infrastructure themselves.
    """

    settings: Settings
    db: Database
    parts: Parts
    pool: WorkerPool | None = None
    hub: AgentHub | None = None
    missions: MissionRunner | None = None
    monitors: MonitorRunner | None = None

    @classmethod
    async def open(
        cls, settings: Settings, *, migrate: bool = True, create: bool = True
    ) -> Runtime:
        """Open the shared parts; ``create=False``: refuse a database never set up (see
        ``open_database``)."""
        parser_registry.entries()  # plugins found at start-up; a broken one is logged, not fatal
        db = await open_database(settings, migrate=migrate, create=create)
        detect.install()  # alert events are detected in the transaction that records them
        completion.install()  # so are tasks and batches whose completion webhook is due
        runtime = cls(settings, db, Parts.build(db, settings))
        try:
            await runtime.pages.check()  # a missing bucket or a wrong key stops start-up here
        except BaseException:
            await runtime.aclose()
            raise
        return runtime

    @property
    def pages(self) -> PageStore:
        return self.parts.pages

    @property
    def box(self) -> SecretBox:
        return self.parts.box

    @property
    def fetchers(self) -> Fetcher:
        """The process's fetchers (one per kind), for what the server fetches itself."""
        return self.parts.fetchers

    def wake(self) -> None:
        """New work may be claimable (a submit, a restart, a domain switched on)."""
        self.parts.wake()

    def wake_missions(self) -> None:
        """A mission run was requested or a mission queued: this process's orchestrator
        looks now (others see it at their next poll)."""
        if self.missions is not None:
            self.missions.wake()

    def worker_pool(
        self,
        concurrency: int,
        *,
        worker_id: str | None = None,
        kind: str = "worker",
        run_scheduler: bool = True,
    ) -> WorkerPool:
        self.pool = WorkerPool(
            self.db,
            self.settings,
            concurrency=concurrency,
            worker_id=worker_id,
            kind=kind,
            run_scheduler=run_scheduler,
            parts=self.parts,
        )
        return self.pool

    def agent_hub(self) -> AgentHub:
        from forager.agents.hub import AgentHub

        self.hub = AgentHub(self.db, self.settings, parts=self.parts)
        return self.hub

    def mission_runner(self) -> MissionRunner:
        from forager.missions.runner import MissionRunner

        self.missions = MissionRunner(self.db, self.settings, self.box)
        return self.missions

    def monitor_runner(self, owner: str) -> MonitorRunner:
        """Live monitors (issue 15): up to ``monitor_slots`` run in this process, fetched
        through the shared fetchers and read in the shared parse processes."""
        from forager.monitors.runner import MonitorRunner

        parts = self.parts
        self.monitors = MonitorRunner(
            self.db, self.settings, parts.fetchers, parts.parser, owner=owner, box=parts.box
        )
        return self.monitors

    async def aclose(self) -> None:
        """Write what is queued, stop the parse processes and fetchers, close the database."""
        try:
            await self.parts.aclose()
        finally:
            await self.db.dispose()
