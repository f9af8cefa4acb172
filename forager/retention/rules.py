"""What row retention may delete from each table, and what it never deletes.

Each rule finds a batch of candidate rows past its limits (an age, a count) in id order from
a read snapshot; the delete transaction then drops the ones still protected and deletes the
rest by primary key. What protects what:

- ``events``: the events of a task that is not finished (``pending`` … ``parsing``,
  ``paused``) and of a mission that is not (``draft``, ``queued``, ``running``): a live
  task's or mission's timeline stays whole.
- ``crawl_attempts``: an attempt of a task that is not finished, and one that still points at
  a stored page (page retention clears ``page_path`` first, so no page is left unreferenced).
- ``price_history``: only a row that repeats the row before it for its product (same price,
  list price, currency, availability, stock) may go; a change point never does, nor a
  product's newest row. Deleting repeats never turns another row into a change point.
- ``monitor_snapshots``: a monitor's newest snapshot (what its next poll compares against).
- ``alert_deliveries``: a ``pending`` delivery (the outbox still owes it) and the newest
  delivery of each rule and subject (whether that alert is firing or cleared now: an open
  alert's episode stays); a delivery's attempts go with it (foreign key cascade).
- ``feed_runs``: only a succeeded run goes (a running or failed one still owes its range and is
  done again under its file name), never a feed's newest run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import ColumnElement, Table, and_, exists, func, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from forager.config import Settings
from forager.db.models import (
    AlertDelivery,
    Base,
    CrawlAttempt,
    CrawlTask,
    Event,
    FeedRun,
    Mission,
    Monitor,
    MonitorSnapshot,
    PriceHistory,
)
from forager.missions.states import MissionStatus
from forager.queue.lifecycle import TERMINAL

_LIVE_MISSIONS = (MissionStatus.DRAFT, MissionStatus.QUEUED, MissionStatus.RUNNING)
_PRICE_COLUMNS = ("price", "original_price", "currency", "availability", "is_available")


class Rule(Protocol):
    """One table's retention: ``bound`` first (it also fixes the run's limits), then
    candidates in id order, then the ones still protected."""

    table: str

    async def bound(self, session: AsyncSession, now: datetime) -> int:
        """No row with a greater id is past the limits now (0: none is)."""
        ...

    async def candidates(
        self, session: AsyncSession, ids: tuple[int, int], limit: int, now: datetime
    ) -> Sequence[Any]:
        """Up to ``limit`` rows past the limits with ``lo < id <= hi``, by id (``row.id``
        first)."""
        ...

    async def protected(self, session: AsyncSession, rows: Sequence[Any]) -> set[int]:
        """The ids among ``rows`` that must stay (read in the delete's transaction)."""
        ...


async def _max_id(session: AsyncSession, column: Any) -> int:
    return await session.scalar(select(func.max(column))) or 0


Guard = Callable[[AsyncSession, Sequence[Any]], Awaitable[set[int]]]


async def _unguarded(_session: AsyncSession, _rows: Sequence[Any]) -> set[int]:
    return set()


@dataclass(slots=True)
class AgeOrCount:
    """A table pruned by age and/or a table-wide count; ``guard`` names the rows that stay."""

    table: str
    model: Any
    stamp: Any  # the age column (indexed)
    days: float
    max_rows: int
    columns: tuple[Any, ...] = ()  # what ``guard`` reads of each candidate, after its id
    guard: Guard = _unguarded
    only: tuple[ColumnElement[bool], ...] = ()  # rows outside these are never candidates
    _past: list[ColumnElement[bool]] = field(default_factory=list)  # this run's limits

    @property
    def on(self) -> bool:
        return bool(self.days or self.max_rows)

    async def bound(self, session: AsyncSession, now: datetime) -> int:
        """Also fixes this run's limits: the age's cut-off, the count's lowest kept id."""
        pk = self.model.id
        bound = 0
        self._past = []
        if self.days:
            cutoff = now - timedelta(days=self.days)
            self._past.append(self.stamp < cutoff)
            # The id of the newest row past the age, read through the age column's index (ids
            # follow time closely; a straggler past this is found by the next run).
            bound = (
                await session.scalar(
                    select(pk).where(self.stamp < cutoff).order_by(self.stamp.desc()).limit(1)
                )
                or 0
            )
        if self.max_rows:
            floor = await session.scalar(
                select(pk).order_by(pk.desc()).offset(self.max_rows - 1).limit(1)
            )
            if floor is not None:
                self._past.append(pk < floor)
                bound = max(bound, floor - 1)
        return bound

    async def candidates(
        self, session: AsyncSession, ids: tuple[int, int], limit: int, now: datetime
    ) -> Sequence[Any]:
        pk = self.model.id
        return (
            await session.execute(
                select(pk, *self.columns)
                .where(pk > ids[0], pk <= ids[1], or_(*self._past), *self.only)
                .order_by(pk)
                .limit(limit)
            )
        ).all()

    async def protected(self, session: AsyncSession, rows: Sequence[Any]) -> set[int]:
        return await self.guard(session, rows)


async def _live_attempts(session: AsyncSession, rows: Sequence[Any]) -> set[int]:
    live = await _live_tasks(session, {row.task_id for row in rows})
    return {row.id for row in rows if row.task_id in live}


async def _newest_deliveries(session: AsyncSession, rows: Sequence[Any]) -> set[int]:
    """The newest delivery of each rule and subject among ``rows``'s: what says whether that
    alert is firing or cleared now."""
    d = AlertDelivery
    subjects = {(r.rule_id, r.subject_type, r.subject_id) for r in rows}
    newest = await session.scalars(
        select(func.max(d.id))
        .where(tuple_(d.rule_id, d.subject_type, d.subject_id).in_(subjects))
        .group_by(d.rule_id, d.subject_type, d.subject_id)
    )
    return set(newest)


async def _newest_feed_runs(session: AsyncSession, rows: Sequence[Any]) -> set[int]:
    """Each feed's newest run among ``rows``'s feeds: what its history shows last."""
    newest = await session.scalars(
        select(func.max(FeedRun.id))
        .where(FeedRun.feed_id.in_({row.feed_id for row in rows}))
        .group_by(FeedRun.feed_id)
    )
    return set(newest)


async def _live_tasks(session: AsyncSession, ids: set[int]) -> set[int]:
    if not ids:
        return set()
    found = await session.scalars(
        select(CrawlTask.id).where(CrawlTask.id.in_(ids), CrawlTask.status.not_in(TERMINAL))
    )
    return set(found)


async def _live_events(session: AsyncSession, rows: Sequence[Any]) -> set[int]:
    def ids(kind: str) -> set[int]:
        return {int(r.entity_id) for r in rows if r.entity_type == kind and r.entity_id.isdigit()}

    tasks = await _live_tasks(session, ids("task"))
    missions: set[int] = set()
    if wanted := ids("mission"):
        missions = set(
            await session.scalars(
                select(Mission.id).where(Mission.id.in_(wanted), Mission.status.in_(_LIVE_MISSIONS))
            )
        )
    live = {("task", str(i)) for i in tasks} | {("mission", str(i)) for i in missions}
    return {r.id for r in rows if (r.entity_type, r.entity_id) in live}


@dataclass(slots=True)
class PriceRepeats:
    """Price history rows older than ``days`` that repeat the row before them."""

    days: float
    table: str = "price_history"

    @property
    def on(self) -> bool:
        return bool(self.days)

    async def bound(self, session: AsyncSession, now: datetime) -> int:
        return await _max_id(session, PriceHistory.id)

    async def candidates(
        self, session: AsyncSession, ids: tuple[int, int], limit: int, now: datetime
    ) -> Sequence[Any]:
        row, before = PriceHistory, aliased(PriceHistory)
        earlier, later = aliased(PriceHistory), aliased(PriceHistory)
        order = (row.recorded_at, row.id)
        previous = (
            select(earlier.id)
            .where(
                earlier.product_id == row.product_id,
                tuple_(earlier.recorded_at, earlier.id) < tuple_(*order),
            )
            .order_by(earlier.recorded_at.desc(), earlier.id.desc())
            .limit(1)
            .correlate(row)
            .scalar_subquery()
        )
        newer = (
            exists()
            .where(
                later.product_id == row.product_id,
                tuple_(later.recorded_at, later.id) > tuple_(*order),
            )
            .correlate(row)
        )
        same = [
            getattr(before, name).is_not_distinct_from(getattr(row, name))
            for name in _PRICE_COLUMNS
        ]
        return (
            await session.execute(
                select(row.id)
                .join(before, before.id == previous)
                .where(
                    row.id > ids[0],
                    row.id <= ids[1],
                    row.recorded_at < now - timedelta(days=self.days),
                    newer,
                    *same,
                )
                .order_by(row.id)
                .limit(limit)
            )
        ).all()

    async def protected(self, session: AsyncSession, rows: Sequence[Any]) -> set[int]:
        # Rows are only ever appended, so a repeat found in the snapshot is still one.
        return set()


@dataclass(slots=True)
class Snapshots:
    """Monitor snapshots past an age or each monitor's newest ``keep_last``."""

    days: float
    keep_last: int
    table: str = "monitor_snapshots"
    _past: list[ColumnElement[bool]] = field(default_factory=list)  # this run's limits

    @property
    def on(self) -> bool:
        return bool(self.days or self.keep_last)

    async def bound(self, session: AsyncSession, now: datetime) -> int:
        """Also fixes this run's limits: the age's cut-off, each monitor's newest keep_last."""
        s = MonitorSnapshot
        self._past = []
        if self.days:
            self._past.append(s.observed_at < now - timedelta(days=self.days))
        if self.keep_last:
            # Per monitor (the monitors table is small), through the (monitor_id, observed_at)
            # index: where its newest keep_last begin.
            for monitor_id in await session.scalars(select(Monitor.id)):
                mine = s.monitor_id == monitor_id
                cut = (
                    await session.execute(
                        select(s.observed_at, s.id)
                        .where(mine)
                        .order_by(s.observed_at.desc(), s.id.desc())
                        .offset(self.keep_last - 1)
                        .limit(1)
                    )
                ).first()
                if cut is not None:
                    self._past.append(and_(mine, tuple_(s.observed_at, s.id) < tuple_(*cut)))
        return await _max_id(session, s.id) if self._past else 0

    async def candidates(
        self, session: AsyncSession, ids: tuple[int, int], limit: int, now: datetime
    ) -> Sequence[Any]:
        s = MonitorSnapshot
        return (
            await session.execute(
                select(s.id, s.monitor_id)
                .where(s.id > ids[0], s.id <= ids[1], or_(*self._past))
                .order_by(s.id)
                .limit(limit)
            )
        ).all()

    async def protected(self, session: AsyncSession, rows: Sequence[Any]) -> set[int]:
        s = MonitorSnapshot
        newest: set[int] = set()
        for monitor_id in {row.monitor_id for row in rows}:
            found = await session.scalar(
                select(s.id)
                .where(s.monitor_id == monitor_id)
                .order_by(s.observed_at.desc(), s.id.desc())
                .limit(1)
            )
            if found is not None:
                newest.add(found)
        return newest


def rules(settings: Settings) -> list[Rule]:
    """Every table's rule, in the order they are pruned; a rule whose limits are all 0 is
    left out."""
    s = settings
    every: list[AgeOrCount | PriceRepeats | Snapshots] = [
        AgeOrCount(
            "events",
            Event,
            Event.created_at,
            s.event_retention_days,
            s.event_retention_max_rows,
            columns=(Event.entity_type, Event.entity_id),
            guard=_live_events,
        ),
        AgeOrCount(
            "crawl_attempts",
            CrawlAttempt,
            CrawlAttempt.started_at,
            s.attempt_retention_days,
            s.attempt_retention_max_rows,
            columns=(CrawlAttempt.task_id,),
            guard=_live_attempts,
            only=(CrawlAttempt.page_path.is_(None),),
        ),
        PriceRepeats(s.price_history_retention_days),
        Snapshots(s.monitor_snapshot_retention_days, s.monitor_snapshot_keep_last),
        AgeOrCount(
            "alert_deliveries",
            AlertDelivery,
            AlertDelivery.created_at,
            s.alert_delivery_retention_days,
            0,
            columns=(AlertDelivery.rule_id, AlertDelivery.subject_type, AlertDelivery.subject_id),
            guard=_newest_deliveries,
            only=(AlertDelivery.status != "pending",),
        ),
        AgeOrCount(
            "feed_runs",
            FeedRun,
            FeedRun.started_at,
            s.feed_run_retention_days,
            0,
            columns=(FeedRun.feed_id,),
            guard=_newest_feed_runs,
            only=(FeedRun.status == "succeeded",),
        ),
    ]
    return [rule for rule in every if rule.on]


def table_of(rule: Rule) -> Table:
    return Base.metadata.tables[rule.table]
