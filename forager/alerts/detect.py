"""Change detection into the outbox, in the transaction of the change itself.

Three entry points, all set-based so the task path's group commit pays one indexed read of the
enabled rules only when something alert-worthy happened:

- ``products``: called by ``forager.products.persist.save_products`` with the products whose
  price or availability moved (or that are new);
- ``events``: installed as an audit flush hook (``install``), it sees every audit event of the
  transaction and picks those that are alert events (a task failed for good, a domain's
  breaker opened, an agent blocked, a mission finished or failed, a crawl job's budget spent
  or its re-run: an episode, ``episodes``);
- ``snapshots``: called by ``forager.monitors.writes`` with a monitor's new values.

Each match becomes an ``alert_deliveries`` row (the outbox) in the same transaction, so a
change and its notification are committed together or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import bindparam, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.alerts import episodes, outbox
from forager.alerts.rules import (
    AUDIT_KINDS,
    EPISODE_KINDS,
    PRODUCT_KINDS,
    Observation,
    change_pct,
    fires,
)
from forager.db import audit
from forager.db.models import (
    AlertDelivery,
    AlertRule,
    CrawlTask,
    PriceHistory,
    Product,
    ProductTag,
)
from forager.db.types import utcnow

# The enabled rules of some kinds: built once (every group of the writer asks for them).
_RULES = select(AlertRule).where(
    AlertRule.enabled.is_(True), AlertRule.kind.in_(bindparam("b_kinds", expanding=True))
)


async def _rules(session: AsyncSession, kinds: Iterable[str]) -> list[AlertRule]:
    found = await session.execute(_RULES, {"b_kinds": list(kinds)})
    return list(found.scalars())


async def _batches(session: AsyncSession, task_ids: set[int]) -> dict[int, str | None]:
    if not task_ids:
        return {}
    rows = await session.execute(
        select(CrawlTask.id, CrawlTask.batch_name).where(CrawlTask.id.in_(task_ids))
    )
    return {row.id: row.batch_name for row in rows}


async def _tags(session: AsyncSession, model: Any, ids: set[int]) -> dict[int, set[str]]:
    """The tags of products or tasks (``model``) by id, through their URL's hash."""
    found: dict[int, set[str]] = {}
    if not ids:
        return found
    rows = await session.execute(
        select(model.id, ProductTag.tag)
        .join(ProductTag, ProductTag.url_hash == model.url_hash)
        .where(model.id.in_(ids))
    )
    for entity_id, tag in rows:
        found.setdefault(entity_id, set()).add(tag)
    return found


def _in_scope(
    rule: AlertRule,
    *,
    product_id: int | None,
    domain_id: int | None,
    batch: str | None,
    tags: set[str] | frozenset[str] = frozenset(),
    monitor_id: int | None = None,
    job_id: int | None = None,
) -> bool:
    return (
        (rule.monitor_id is None or rule.monitor_id == monitor_id)
        and (rule.job_id is None or rule.job_id == job_id)
        and (rule.product_id is None or rule.product_id == product_id)
        and (rule.domain_id is None or rule.domain_id == domain_id)
        and (rule.batch_name is None or rule.batch_name == batch)
        and (rule.tag is None or rule.tag in tags)
    )


async def last_good(
    session: AsyncSession, observations: Sequence[Observation]
) -> list[Observation]:
    """Fill in the last good price / availability where the latest row had none (a partial
    crawl before this one): the value before that crawl stands."""
    gaps = [o.product_id for o in observations if o.old_price is None or o.old_available is None]
    if not gaps:
        return list(observations)
    rows = await session.execute(
        select(PriceHistory.product_id, PriceHistory.price, PriceHistory.is_available)
        .where(PriceHistory.product_id.in_(gaps))
        .order_by(PriceHistory.id.desc())
    )
    price: dict[int, Decimal] = {}
    available: dict[int, bool] = {}
    for product_id, value, stock in rows:
        if value is not None:
            price.setdefault(product_id, value)
        if stock is not None:
            available.setdefault(product_id, stock)
    return [
        _replace(
            o,
            old_price=o.old_price if o.old_price is not None else price.get(o.product_id),
            old_available=(
                o.old_available if o.old_available is not None else available.get(o.product_id)
            ),
        )
        for o in observations
    ]


def _replace(o: Observation, **values: Any) -> Observation:
    fields = {name: getattr(o, name) for name in Observation.__slots__}
    fields.update(values)
    return Observation(**fields)


async def products(
    session: AsyncSession, observations: Sequence[Observation], *, filled: bool = False
) -> int:
    """Queue a delivery for every enabled product rule ``observations`` fire; how many.

    Call before the new price history rows are inserted (``last_good`` reads the history);
    ``filled``: the caller already passed them through ``last_good``.
    """
    if not observations:
        return 0
    rules = await _rules(session, PRODUCT_KINDS)
    if not rules:
        return 0
    seen = list(observations) if filled else await last_good(session, observations)
    batches = (
        await _batches(session, {o.task_id for o in seen if o.task_id is not None})
        if any(r.batch_name is not None for r in rules)
        else {}
    )
    tagged = (
        await _tags(session, Product, {o.product_id for o in seen})
        if any(r.tag is not None for r in rules)
        else {}
    )
    now = utcnow()
    rows = []
    for o in seen:
        batch = batches.get(o.task_id) if o.task_id is not None else None
        tags = tagged.get(o.product_id, set())
        for rule in rules:
            if _in_scope(
                rule, product_id=o.product_id, domain_id=o.domain_id, batch=batch, tags=tags
            ) and fires(rule, o):
                rows.append(outbox.delivery(rule, "product", o.product_id, _product_data(o), now))
    if rows:
        await session.execute(insert(AlertDelivery), rows)
    return len(rows)


def _money(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _product_data(o: Observation) -> dict[str, Any]:
    pct = (
        change_pct(o.old_price, o.price)
        if o.old_price is not None and o.price is not None
        else None
    )
    return {
        "id": o.product_id,
        "domain_id": o.domain_id,
        "url": o.url,
        "name": o.name,
        "currency": o.currency,
        "price": _money(o.price),
        "previous_price": _money(o.old_price),
        "change_percent": None if pct is None else round(pct, 2),
        # A crawl that read no availability (a parser without it) leaves the last one read
        # standing, as it does for the rules: null only when none was ever read.
        "is_available": o.available if o.available is not None else o.old_available,
        "availability_read": o.available is not None,
        "was_available": o.old_available,
    }


def _event_kind(row: dict[str, Any]) -> str | None:
    kind = AUDIT_KINDS.get((row["entity_type"], row["event"]))
    if kind is None and row["entity_type"] == "task":
        details = row["details"] or {}
        if details.get("to") == "failed":
            return "task_failed"
    if kind is None and row["entity_type"] == "crawl_job":
        # A job ended by its duration ran out of time; a re-run clears its budget episode.
        details = row["details"] or {}
        if row["event"] == "rerun" or (row["event"] == "done" and details.get("why") == "duration"):
            return "budget_exhausted"
    return kind


async def events(session: AsyncSession, rows: Sequence[dict[str, Any]]) -> None:
    """The audit flush hook: queue deliveries for the alert events among ``rows``."""
    found = [(kind, row) for row in rows if (kind := _event_kind(row)) is not None]
    if not found:
        return
    rules = await _rules(session, {kind for kind, _ in found})
    if not rules:
        return
    task_ids = {int(row["entity_id"]) for kind, row in found if kind == "task_failed"}
    tasks: dict[int, Any] = {}
    if task_ids:
        for task_row in await session.execute(
            select(
                CrawlTask.id,
                CrawlTask.domain_id,
                CrawlTask.batch_name,
                CrawlTask.url,
                CrawlTask.error_type,
                CrawlTask.error_message,
            ).where(CrawlTask.id.in_(task_ids))
        ):
            tasks[task_row.id] = task_row
    tagged = (
        await _tags(session, CrawlTask, task_ids) if any(r.tag is not None for r in rules) else {}
    )
    now = utcnow()
    deliveries = []
    for kind, row in found:
        entity_id = row["entity_id"]
        data: dict[str, Any] = {"id": _id(entity_id), "event": row["event"]}
        data.update(row["details"] or {})
        domain_id: int | None = None
        batch: str | None = None
        tags: set[str] = set()
        if kind == "task_failed":
            tags = tagged.get(int(entity_id), set())
            failed = tasks.get(int(entity_id))
            if failed is not None:
                domain_id, batch = failed.domain_id, failed.batch_name
                data |= {
                    "domain_id": failed.domain_id,
                    "batch_name": failed.batch_name,
                    "url": failed.url,
                    "error_type": failed.error_type or data.get("error_type"),
                }
        elif kind == "breaker_opened":
            domain_id = int(entity_id)
        scope: dict[str, int | None] = {
            "monitor_id": int(entity_id) if row["entity_type"] == "monitor" else None,
            "job_id": int(entity_id) if row["entity_type"] == "crawl_job" else None,
        }
        for rule in rules:
            # A rule scoped to a product, or a domain for an agent event, never matches here.
            if rule.kind != kind or not _in_scope(
                rule, product_id=None, domain_id=domain_id, batch=batch, tags=tags, **scope
            ):
                continue
            if kind not in EPISODE_KINDS:
                deliveries.append(outbox.delivery(rule, row["entity_type"], entity_id, data, now))
                continue
            fire = row["event"] != "rerun"
            subject = f"{row['entity_type']}:{entity_id}"
            if await episodes.move(session, rule.id, subject, fire=fire, value=None, now=now):
                deliveries.append(
                    episodes.delivery(rule, row["entity_type"], entity_id, data, now, fire=fire)
                )
    if deliveries:
        await session.execute(insert(AlertDelivery), deliveries)


async def snapshots(session: AsyncSession, rows: Sequence[dict[str, Any]]) -> None:
    """A monitor's new values (``monitor_snapshots`` rows about to be written, in the same
    transaction): ``monitor_changed`` rules of those monitors fire, one delivery per change."""
    if not rows:
        return
    rules = await _rules(session, ["monitor_changed"])
    if not rules:
        return
    now = utcnow()
    deliveries = []
    for snap in rows:
        data = {
            "id": snap["monitor_id"],
            "event": "value_changed",
            "data": snap["data"],
            "observed_at": snap["observed_at"].isoformat(),
        }
        for rule in rules:
            if _in_scope(
                rule, product_id=None, domain_id=None, batch=None, monitor_id=snap["monitor_id"]
            ):
                deliveries.append(outbox.delivery(rule, "monitor", snap["monitor_id"], data, now))
    if deliveries:
        await session.execute(insert(AlertDelivery), deliveries)


def _id(entity_id: str) -> int | str:
    return int(entity_id) if entity_id.isdigit() else entity_id


def install() -> None:
    """Make every transaction's audit events pass through ``events`` (idempotent)."""
    audit.on_flush(events)
