"""The operational rules measured by the scheduler (``rules.WATCHED_KINDS``), every
``FORAGER_ALERT_EVALUATE_SECONDS`` in every process that runs it.

Each rule's figure is one bounded query: the active proxies; the fetch attempts of the rule's
window (``crawl_attempts.started_at`` is indexed) by domain, or of its domain or batch; the
enabled monitors. A subject whose condition holds opens an episode, one whose condition no
longer holds clears it (``episodes.move``: compare-and-set, so however many processes
evaluate, each episode is told once when it opens and once when it clears). A rate over
fewer than ``min_attempts`` attempts is no figure: the episode stays as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.alerts import episodes
from forager.alerts.rules import WATCHED_KINDS
from forager.db.engine import Database
from forager.db.models import (
    AlertDelivery,
    AlertRule,
    CrawlAttempt,
    CrawlTask,
    Domain,
    Monitor,
    Proxy,
)
from forager.db.types import utcnow

DEFAULT_WINDOW_SECONDS = 600  # rates, and a monitor's staleness
DEFAULT_MIN_ATTEMPTS = 10  # rates; a monitor's failing: 3 polls in a row
DEFAULT_FAILED_POLLS = 3
_MONITOR_KINDS = ("monitor_stale", "monitor_failing")


@dataclass(frozen=True, slots=True)
class Figure:
    """One subject's measure: does the condition hold (None: too few attempts to say)."""

    subject_type: str
    subject_id: int | str
    holds: bool | None
    value: float | None
    data: dict[str, Any] = field(default_factory=dict)


async def evaluate(db: Database) -> int:
    """Measure every enabled watched rule, open and clear their episodes; deliveries queued."""
    async with db.reader() as session:
        rules = list(
            await session.scalars(
                select(AlertRule)
                .where(AlertRule.enabled.is_(True), AlertRule.kind.in_(WATCHED_KINDS))
                .order_by(AlertRule.id)
            )
        )
        session.expunge_all()
    told = 0
    for rule in rules:
        async with db.session() as session:
            told += await _judge(session, rule, utcnow())
    return told


async def _judge(session: AsyncSession, rule: AlertRule, now: datetime) -> int:
    figures = await measure(session, rule, now)
    open_now = await episodes.firing(session, rule.id)
    rows = []
    for subject, figure in figures.items():
        if figure.holds is None or figure.holds == (subject in open_now):
            continue
        fire = figure.holds
        if await episodes.move(session, rule.id, subject, fire=fire, value=figure.value, now=now):
            rows.append(
                episodes.delivery(
                    rule,
                    figure.subject_type,
                    figure.subject_id,
                    figure.data,
                    now,
                    fire=fire,
                    since=open_now.get(subject),
                )
            )
    if rule.kind in _MONITOR_KINDS:  # a monitor deleted while its episode was open
        for subject in open_now.keys() - figures.keys():
            if await episodes.move(session, rule.id, subject, fire=False, value=None, now=now):
                monitor_id = int(subject.partition(":")[2])
                gone = {"id": monitor_id, "deleted": True}
                rows.append(
                    episodes.delivery(
                        rule,
                        "monitor",
                        monitor_id,
                        gone,
                        now,
                        fire=False,
                        since=open_now[subject],
                    )
                )
    if rows:
        await session.execute(insert(AlertDelivery), rows)
    return len(rows)


async def measure(session: AsyncSession, rule: AlertRule, now: datetime) -> dict[str, Figure]:
    """The figures of ``rule`` by subject, now."""
    if rule.kind == "proxies_low":
        return await _proxies(session, rule)
    if rule.kind in ("failure_rate_high", "parse_rate_low"):
        return await _rates(session, rule, now)
    return await _monitors(session, rule, now)


async def _proxies(session: AsyncSession, rule: AlertRule) -> dict[str, Figure]:
    active = await session.scalar(select(func.count()).where(Proxy.is_active.is_(True))) or 0
    threshold = float(rule.threshold or 0)
    data = {"active": active, "threshold": threshold}
    return {"proxies": Figure("proxies", "active", active < threshold, float(active), data)}


async def _rates(session: AsyncSession, rule: AlertRule, now: datetime) -> dict[str, Figure]:
    """Fetch attempts of the window: the failed share (``failure_rate_high``) or the share
    of pages parsed among those fetched (``parse_rate_low``), per domain or for the scope."""
    window = rule.window_seconds or DEFAULT_WINDOW_SECONDS
    least = rule.min_attempts or DEFAULT_MIN_ATTEMPTS
    a = CrawlAttempt
    ok = func.sum(case((a.outcome == "success", 1), else_=0))
    failed = func.sum(case((a.outcome.in_(("retry", "failed")), 1), else_=0))
    unparsed = func.sum(
        case((a.outcome.in_(("retry", "failed")) & (a.error_type == "parse"), 1), else_=0)
    )
    by_batch = rule.batch_name is not None
    key: Any = CrawlTask.batch_name if by_batch else CrawlTask.domain_id
    query = (
        select(key, ok, failed, unparsed)
        .join(CrawlTask, CrawlTask.id == a.task_id)
        .where(a.phase == "fetch", a.started_at >= now - timedelta(seconds=window))
        .group_by(key)
    )
    if by_batch:
        query = query.where(CrawlTask.batch_name == rule.batch_name)
    if rule.domain_id is not None:
        query = query.where(CrawlTask.domain_id == rule.domain_id)
    rows = list(await session.execute(query))
    names = await _domain_names(session, [] if by_batch else [r[0] for r in rows])
    percent = rule.percent if rule.percent is not None else 0.0
    found = {}
    for subject_id, n_ok, n_failed, n_unparsed in rows:
        n_ok, n_failed, n_unparsed = int(n_ok or 0), int(n_failed or 0), int(n_unparsed or 0)
        data: dict[str, Any] = {"id": subject_id, "window_seconds": window, "percent": percent}
        if not by_batch:
            data["name"] = names.get(subject_id)
        if rule.kind == "failure_rate_high":
            judged = n_ok + n_failed
            value = 100.0 * n_failed / judged if judged else 0.0
            holds = value >= percent
            data |= {"attempts": judged, "failed": n_failed, "failure_rate_percent": value}
        else:
            judged = n_ok + n_unparsed
            value = 100.0 * n_ok / judged if judged else 100.0
            holds = value < percent
            data |= {"pages": judged, "unparsed": n_unparsed, "parse_success_percent": value}
        subject_type = "batch" if by_batch else "domain"
        found[f"{subject_type}:{subject_id}"] = Figure(
            subject_type, subject_id, holds if judged >= least else None, round(value, 2), data
        )
    return found


async def _domain_names(session: AsyncSession, ids: Sequence[int]) -> dict[int, str]:
    if not ids:
        return {}
    rows = await session.execute(
        select(Domain.id, Domain.domain_name).where(Domain.id.in_(list(ids)))
    )
    return {row.id: row.domain_name for row in rows}


async def _monitors(session: AsyncSession, rule: AlertRule, now: datetime) -> dict[str, Figure]:
    """Every monitor (or the rule's one): stale or failing while enabled; a paused monitor
    clears its episode (it is expected to be quiet)."""
    query = select(
        Monitor.id,
        Monitor.name,
        Monitor.enabled,
        Monitor.consecutive_errors,
        Monitor.last_error,
        Monitor.last_success_at,
        Monitor.created_at,
    )
    if rule.monitor_id is not None:
        query = query.where(Monitor.id == rule.monitor_id)
    found = {}
    for m in await session.execute(query):
        data: dict[str, Any] = {"id": m.id, "name": m.name}
        if rule.kind == "monitor_stale":
            window = rule.window_seconds or DEFAULT_WINDOW_SECONDS
            age = (now - (m.last_success_at or m.created_at)).total_seconds()
            holds = bool(m.enabled) and age > window
            value = round(age, 3)
            data |= {
                "last_success_at": None
                if m.last_success_at is None
                else m.last_success_at.isoformat(),
                "data_age_seconds": value,
                "window_seconds": window,
            }
        else:
            least = rule.min_attempts or DEFAULT_FAILED_POLLS
            holds = bool(m.enabled) and m.consecutive_errors >= least
            value = float(m.consecutive_errors)
            data |= {"failed_polls_in_a_row": m.consecutive_errors, "last_error": m.last_error}
        found[f"monitor:{m.id}"] = Figure("monitor", m.id, holds, value, data)
    return found
