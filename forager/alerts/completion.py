"""Completion webhooks (issue 35, seed 004's ``webhook_url``): a task's, posted with its products
each time it completes; a batch's, posted once with its products when none of its tasks is left
to run. Sent through the outbox like any alert (signed, retried, every try recorded).

A submission's webhook becomes an alert rule of kind ``task_completed`` or ``batch_completed``
(the URL and the optional signing secret encrypted, shown masked in /api/alerts/rules, where it
can be disabled or deleted) and ``completion_hooks`` rows naming the task or the batch. The
deliveries are written by an audit flush hook, in the transaction that completes the tasks.

The last two tasks of a batch may complete in two transactions at once (PostgreSQL), each
seeing the other's task still running. So a transaction that ends a task of a hooked batch
locks the hook's row first and counts the batch's unfinished tasks after: the second waits for
the first to commit, then counts with a fresh snapshot (READ COMMITTED) and fires — exactly
one of them does. SQLite's writers serialize anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import bindparam, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.alerts import people
from forager.crypto import SecretBox
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import AlertDelivery, AlertRule, CompletionHook, CrawlTask, Product
from forager.db.types import utcnow
from forager.errors import EgressDenied, InvalidRequest, NetworkError
from forager.fetch.egress import EgressPolicy, Resolver
from forager.queue.lifecycle import TERMINAL, TaskStatus

KINDS = ("task_completed", "batch_completed")
# Products in one batch payload at most (the rest: a feed filtered by batch, docs/FEEDS.md).
PAYLOAD_PRODUCTS = 500
_PRODUCT_FIELDS = (
    "id",
    "url",
    "product_name",
    "price",
    "currency",
    "original_price",
    "availability",
    "is_available",
    "brand",
    "sku",
    "gtin",
    "rating",
    "review_count",
)


async def check_url(url: str, private_targets: str) -> None:
    """InvalidRequest (``webhook_url``) unless the egress policy lets a webhook reach ``url``
    (checked again at every send, as for alert rules' webhooks)."""
    host = urlsplit(url).hostname or ""
    try:
        await Resolver().connect_address(EgressPolicy(private_targets, host), host)
    except (EgressDenied, NetworkError) as exc:
        raise InvalidRequest(f"webhook_url: {exc}", field="webhook_url") from exc


async def register(
    db: Database,
    box: SecretBox,
    *,
    url: str,
    secret: str | None,
    task_ids: Sequence[int] = (),
    batch_name: str | None = None,
) -> None:
    """Post to ``url`` when each of ``task_ids`` completes (now, if it already has), or once
    ``batch_name`` is done (registered before its tasks are submitted, so none ends unseen).

    A batch submitted in several requests with the same URL gets one hook, not one per request.
    """
    if not task_ids and batch_name is None:
        return
    async with db.session() as session:
        if batch_name is not None:
            waiting = await session.execute(
                select(AlertRule.target_enc)
                .join(CompletionHook, CompletionHook.rule_id == AlertRule.id)
                .where(CompletionHook.batch_name == batch_name, CompletionHook.fired_at.is_(None))
            )
            if any(box.decrypt(target) == url for (target,) in waiting):
                return
        kind = "batch_completed" if batch_name is not None else "task_completed"
        subject = f"batch {batch_name}" if batch_name is not None else f"task {task_ids[0]}"
        if len(task_ids) > 1:
            subject = f"{len(task_ids)} tasks"
        rule = AlertRule(
            name=f"completion of {subject}"[:100],
            kind=kind,
            enabled=True,
            fire_on_first=False,
            batch_name=batch_name,
            channel="webhook",
            target_enc=box.encrypt(url),
            target_display=people.mask(url),
            secret_enc=None if secret is None else box.encrypt(secret),
        )
        session.add(rule)
        await session.flush()
        rows: list[dict[str, Any]] = (
            [{"rule_id": rule.id, "batch_name": batch_name}]
            if batch_name is not None
            else [{"rule_id": rule.id, "task_id": t} for t in dict.fromkeys(task_ids)]
        )
        now = utcnow()
        await session.execute(insert(CompletionHook), [{**r, "created_at": now} for r in rows])
        audit.record(session, "alert_rule", [rule.id], "created", {"name": rule.name, "kind": kind})
        if task_ids:  # a task that completed before its hook was written is posted now
            done = await session.scalars(
                select(CrawlTask.id).where(
                    CrawlTask.id.in_(list(task_ids)), CrawlTask.status == TaskStatus.COMPLETED
                )
            )
            await _fire(session, dict.fromkeys(done, TaskStatus.COMPLETED.value))


def _product(product: Product) -> dict[str, Any]:
    record: dict[str, Any] = {name: getattr(product, name) for name in _PRODUCT_FIELDS}
    for key in ("price", "original_price", "rating"):
        if record[key] is not None:
            record[key] = str(record[key])
    record["updated_at"] = product.updated_at.isoformat()
    return record


def _delivery(
    rule_id: int, kind: str, subject: tuple[str, str], payload: dict[str, Any], now: datetime
) -> dict[str, Any]:
    return {
        "rule_id": rule_id,
        "event": kind,
        "subject_type": subject[0],
        "subject_id": subject[1],
        "payload": {"event": kind, "occurred_at": now.isoformat(), **payload},
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": now,
        "created_at": now,
    }


async def _batch_done(
    session: AsyncSession, hook_id: int, rule_id: int, batch: str, now: datetime
) -> dict[str, Any] | None:
    """The batch's delivery if none of its tasks is left to run (the hook then fired)."""
    locked = await session.scalar(
        select(CompletionHook.id)
        .where(CompletionHook.id == hook_id, CompletionHook.fired_at.is_(None))
        .with_for_update()
    )
    if locked is None:  # another transaction fired it meanwhile
        return None
    counts = dict(
        (
            await session.execute(
                select(CrawlTask.status, func.count())
                .where(CrawlTask.batch_name == batch)
                .group_by(CrawlTask.status)
            )
        ).all()
    )
    if any(status not in TERMINAL for status in counts):
        return None
    in_batch = select(CrawlTask.id).where(CrawlTask.batch_name == batch)
    total = await session.scalar(
        select(func.count()).select_from(Product).where(Product.crawl_task_id.in_(in_batch))
    )
    products = await session.scalars(
        select(Product)
        .where(Product.crawl_task_id.in_(in_batch))
        .order_by(Product.id)
        .limit(PAYLOAD_PRODUCTS)
    )
    await session.execute(
        update(CompletionHook).where(CompletionHook.id == hook_id).values(fired_at=now)
    )
    payload = {
        "batch": {"name": batch, "tasks": {str(k): int(v) for k, v in counts.items()}},
        "products": [_product(p) for p in products],
        "products_total": int(total or 0),
    }
    return _delivery(rule_id, "batch_completed", ("batch", batch), payload, now)


async def events(session: AsyncSession, rows: Sequence[dict[str, Any]]) -> None:
    """The audit flush hook: deliveries for hooked tasks that completed and hooked batches
    whose last task ended, in the transaction that moved them."""
    ended: dict[int, str] = {}
    for row in rows:
        if row["entity_type"] == "task":
            to = (row["details"] or {}).get("to")
            if to in TERMINAL:
                ended[int(row["entity_id"])] = to
    if ended:
        await _fire(session, ended)


# The hooks of a transaction's ended tasks: built once, as every group of the writer asks.
_HOOKS_OF = (
    select(
        CompletionHook.id,
        CompletionHook.rule_id,
        CompletionHook.task_id,
        CompletionHook.batch_name,
    )
    .join(AlertRule, AlertRule.id == CompletionHook.rule_id)
    .where(
        AlertRule.enabled.is_(True),
        or_(
            CompletionHook.task_id.in_(bindparam("b_completed", expanding=True)),
            CompletionHook.fired_at.is_(None)
            & CompletionHook.batch_name.in_(
                select(CrawlTask.batch_name).where(
                    CrawlTask.id.in_(bindparam("b_ended", expanding=True))
                )
            ),
        ),
    )
    .order_by(CompletionHook.id)  # rows locked in one order: no deadlock
)


async def _fire(session: AsyncSession, ended: dict[int, str]) -> None:
    """Deliveries for the hooks of ``ended`` tasks (id → status) and of their batches."""
    completed = [t for t, to in ended.items() if to == TaskStatus.COMPLETED]
    hooks = (
        await session.execute(_HOOKS_OF, {"b_completed": completed, "b_ended": list(ended)})
    ).all()
    if not hooks:
        return
    now = utcnow()
    deliveries = []
    task_hooks = [h for h in hooks if h.task_id is not None]
    if task_hooks:
        tasks = {
            t.id: t
            for t in await session.execute(
                select(CrawlTask.id, CrawlTask.url, CrawlTask.batch_name).where(
                    CrawlTask.id.in_([h.task_id for h in task_hooks])
                )
            )
        }
        products: dict[int, list[dict[str, Any]]] = {}
        for product in await session.scalars(
            select(Product).where(Product.crawl_task_id.in_(list(tasks)))
        ):
            assert product.crawl_task_id is not None
            products.setdefault(product.crawl_task_id, []).append(_product(product))
        for hook in task_hooks:
            task = tasks[hook.task_id]
            payload = {
                "task": {"id": task.id, "url": task.url, "batch_name": task.batch_name},
                "products": products.get(task.id, []),
            }
            subject = ("task", str(task.id))
            deliveries.append(_delivery(hook.rule_id, "task_completed", subject, payload, now))
    for hook in hooks:
        if hook.batch_name is not None:
            found = await _batch_done(session, hook.id, hook.rule_id, hook.batch_name, now)
            if found is not None:
                deliveries.append(found)
    if deliveries:
        await session.execute(insert(AlertDelivery), deliveries)


def install() -> None:
    """Make every transaction's audit events pass through ``events`` (idempotent)."""
    audit.on_flush(events)
