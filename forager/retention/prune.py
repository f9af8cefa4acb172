"""Prune every table's rows past retention in bounded batches (``forager.retention.rules``).

A table is walked in primary-key windows (``WINDOW`` × the batch size ids at a time) up to
the greatest id that may be past its limits: candidates are read from a snapshot, then one
short write transaction per batch re-reads what protects them and deletes the rest by id
(``DELETE … WHERE id IN (…)``, at most ``retention_batch_rows`` rows), then pauses as long as
that transaction took. No statement scans a whole table or holds a lock for long, so workers
keep writing meanwhile (on PostgreSQL only the batch's rows are locked; on SQLite the write
lock is held for one batch, then left free at least as long). Several
processes pruning at once delete the same rows at most once each: harmless.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import delete

from forager.config import Settings
from forager.db.engine import Database
from forager.db.types import utcnow
from forager.retention.rules import Rule, rules, table_of

log = logging.getLogger(__name__)

WINDOW = 4  # ids looked at per candidate query, in batches


@dataclass(slots=True)
class Pruned:
    """Rows deleted (or, in a dry run, that would be) per table."""

    rows: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.rows.values())


async def prune(
    db: Database,
    settings: Settings,
    *,
    dry_run: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
    now: datetime | None = None,
) -> Pruned:
    """Delete the rows past retention of every table (``dry_run``: only count them)."""
    done = Pruned()
    when = now or utcnow()
    for rule in rules(settings):
        done.rows[rule.table] = await _prune_table(
            db, rule, settings.retention_batch_rows, when, dry_run, should_stop
        )
        if should_stop():
            break
    return done


async def _prune_table(
    db: Database,
    rule: Rule,
    batch: int,
    now: datetime,
    dry_run: bool,
    should_stop: Callable[[], bool],
) -> int:
    table = table_of(rule)
    async with db.reader() as session:
        bound = await rule.bound(session, now)
    deleted, after = 0, 0
    while after < bound and not should_stop():
        hi = min(bound, after + batch * WINDOW)
        async with db.reader() as session:
            rows = await rule.candidates(session, (after, hi), batch, now)
        # A full batch may leave more in the window: continue after its last row.
        after = rows[-1].id if len(rows) == batch else hi
        if not rows:
            continue
        started = time.monotonic()
        async with db.reader() if dry_run else db.session() as session:
            keep = await rule.protected(session, rows)
            ids = [row.id for row in rows if row.id not in keep]
            if ids and not dry_run:
                await session.execute(delete(table).where(table.c.id.in_(ids)))
        deleted += len(ids)
        if ids and not dry_run:
            # As long again before the next batch: the database is retention's at most half
            # the time, so group commits and the API keep their pace while a backlog goes.
            await asyncio.sleep(time.monotonic() - started)
    if deleted:
        verb = "would delete" if dry_run else "deleted"
        log.info("retention %s %d %s rows", verb, deleted, rule.table)
    return deleted
