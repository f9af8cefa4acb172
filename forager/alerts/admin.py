"""The alerts API's service: rules (subscriptions), their deliveries and re-sending.

A webhook rule gets a signing secret made here and returned once, by ``create_rule``; the
secret and the target URL (webhook or Apprise: both may carry credentials) are stored
encrypted and shown back only masked. An Apprise URL's typed host is checked with
``FORAGER_PRIVATE_TARGETS`` before the rule is saved (``people.check_host``).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.alerts import people
from forager.alerts.rules import KINDS, PRICE_KINDS, PRODUCT_KINDS
from forager.crypto import SecretBox
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import (
    TAG_PATTERN,
    AlertAttempt,
    AlertDelivery,
    AlertRule,
    CrawlJob,
    Domain,
    Monitor,
    Product,
)
from forager.db.queries import get_or_not_found
from forager.db.types import utcnow
from forager.errors import EgressDenied, InvalidRequest
from forager.fetch.egress import Resolver

THRESHOLD_KINDS = ("price_below", "price_above", "proxies_low")
PERCENT_KINDS = ("price_drop", "price_rise", "failure_rate_high", "parse_rate_low")
RATE_KINDS = ("failure_rate_high", "parse_rate_low")
# The conditions each operational kind needs (``percent``, ``threshold``).
REQUIRED = {"proxies_low": "threshold", "failure_rate_high": "percent", "parse_rate_low": "percent"}
WINDOW_KINDS = (*RATE_KINDS, "monitor_stale")
MIN_ATTEMPTS_KINDS = (*RATE_KINDS, "monitor_failing")
MONITOR_KINDS = ("monitor_changed", "monitor_stale", "monitor_failing")
JOB_KINDS = ("budget_exhausted",)
# Which scopes each kind can have: products belong to a domain (and their task to a batch).
DOMAIN_KINDS = (*PRODUCT_KINDS, "task_failed", "breaker_opened", *RATE_KINDS)
BATCH_KINDS = (*PRODUCT_KINDS, "task_failed", *RATE_KINDS)
# A tag belongs to a product URL, which is also its task's URL.
TAG_KINDS = BATCH_KINDS
DELIVERY_STATUSES = ("pending", "delivered", "failed")


@dataclass(frozen=True, slots=True)
class RuleSpec:
    name: str
    kind: str
    webhook_url: str | None = None
    apprise_url: str | None = None
    percent: float | None = None
    threshold: Decimal | None = None
    min_change_abs: Decimal | None = None
    min_change_pct: float | None = None
    fire_on_first: bool = False
    product_id: int | None = None
    domain_id: int | None = None
    batch_name: str | None = None
    tag: str | None = None
    enabled: bool = True
    window_seconds: int | None = None
    min_attempts: int | None = None
    monitor_id: int | None = None
    job_id: int | None = None


def check(spec: RuleSpec) -> None:
    """Refuse a rule whose fields do not fit its kind, naming the field."""
    if spec.kind not in KINDS:
        raise InvalidRequest(f"kind must be one of {', '.join(KINDS)}", field="kind")
    if (spec.webhook_url is None) == (spec.apprise_url is None):
        raise InvalidRequest("give exactly one of webhook_url and apprise_url", field="webhook_url")
    if spec.apprise_url is not None and not people.valid(spec.apprise_url):
        raise InvalidRequest(
            "Apprise does not recognise this URL (see https://github.com/caronc/apprise/wiki)",
            field="apprise_url",
        )
    if (spec.threshold is None) == (spec.kind in THRESHOLD_KINDS):
        raise InvalidRequest(
            "threshold is required for price_below, price_above and proxies_low, and only for them",
            field="threshold",
        )
    if spec.kind in REQUIRED and getattr(spec, REQUIRED[spec.kind]) is None:
        name = REQUIRED[spec.kind]
        raise InvalidRequest(f"{name} is required for {spec.kind}", field=name)
    if spec.percent is not None and spec.kind not in PERCENT_KINDS:
        raise InvalidRequest(
            "percent is only for price_drop, price_rise, failure_rate_high and parse_rate_low",
            field="percent",
        )
    for name, kinds in (
        ("window_seconds", WINDOW_KINDS),
        ("min_attempts", MIN_ATTEMPTS_KINDS),
        ("monitor_id", MONITOR_KINDS),
        ("job_id", JOB_KINDS),
    ):
        if getattr(spec, name) is not None and spec.kind not in kinds:
            raise InvalidRequest(f"{name} is only for {', '.join(kinds)}", field=name)
    if spec.kind in RATE_KINDS and spec.domain_id is not None and spec.batch_name is not None:
        raise InvalidRequest("a rate is of a domain or of a batch, not both", field="batch_name")
    for name in ("min_change_abs", "min_change_pct"):
        if getattr(spec, name) is not None and spec.kind not in PRICE_KINDS:
            raise InvalidRequest(f"{name} is only for price rules", field=name)
    if spec.fire_on_first and spec.kind not in PRODUCT_KINDS:
        raise InvalidRequest("fire_on_first is only for product rules", field="fire_on_first")
    if spec.product_id is not None and spec.kind not in PRODUCT_KINDS:
        raise InvalidRequest("product_id is only for product rules", field="product_id")
    if spec.domain_id is not None and spec.kind not in DOMAIN_KINDS:
        raise InvalidRequest(
            "domain_id is only for product rules, task_failed, breaker_opened and the rates",
            field="domain_id",
        )
    if spec.batch_name is not None and spec.kind not in BATCH_KINDS:
        raise InvalidRequest(
            "batch_name is only for product rules, task_failed and the rates", field="batch_name"
        )
    if spec.tag is not None:
        if spec.kind not in TAG_KINDS:
            raise InvalidRequest("tag is only for product rules and task_failed", field="tag")
        if not re.search(TAG_PATTERN, spec.tag):
            raise InvalidRequest(
                "tag must be 1-50 lowercase letters, digits, -, _, . or :", field="tag"
            )


async def create_rule(
    db: Database, box: SecretBox, spec: RuleSpec, *, private_targets: str
) -> tuple[AlertRule, str | None]:
    """Save a rule; returns it and, for a webhook, its signing secret (never shown again)."""
    check(spec)
    if spec.apprise_url is not None:
        try:
            await people.check_host(Resolver(), spec.apprise_url, private_targets)
        except EgressDenied as exc:
            raise InvalidRequest(str(exc), field="apprise_url") from exc
    target = spec.webhook_url or spec.apprise_url or ""
    secret = secrets.token_urlsafe(32) if spec.webhook_url is not None else None
    async with db.session() as session:
        for model, value, missing in (
            (Product, spec.product_id, f"no product {spec.product_id}"),
            (Domain, spec.domain_id, f"no domain {spec.domain_id}"),
            (Monitor, spec.monitor_id, f"no monitor {spec.monitor_id}"),
            (CrawlJob, spec.job_id, f"no crawl job {spec.job_id}"),
        ):
            if value is not None:
                await get_or_not_found(session, model, value, missing)
        rule = AlertRule(
            name=spec.name,
            kind=spec.kind,
            enabled=spec.enabled,
            percent=spec.percent,
            threshold=spec.threshold,
            min_change_abs=spec.min_change_abs,
            min_change_pct=spec.min_change_pct,
            fire_on_first=spec.fire_on_first,
            product_id=spec.product_id,
            domain_id=spec.domain_id,
            batch_name=spec.batch_name,
            tag=spec.tag,
            window_seconds=spec.window_seconds,
            min_attempts=spec.min_attempts,
            monitor_id=spec.monitor_id,
            job_id=spec.job_id,
            channel="webhook" if spec.webhook_url is not None else "apprise",
            target_enc=box.encrypt(target),
            target_display=people.mask(target),
            secret_enc=None if secret is None else box.encrypt(secret),
        )
        session.add(rule)
        await session.flush()
        audit.record(
            session, "alert_rule", [rule.id], "created", {"name": rule.name, "kind": rule.kind}
        )
    return rule, secret


async def get_rule(session: AsyncSession, rule_id: int) -> AlertRule:
    return await get_or_not_found(session, AlertRule, rule_id, f"no alert rule {rule_id}")


async def list_rules(
    session: AsyncSession, limit: int, offset: int
) -> tuple[Sequence[AlertRule], int]:
    total = await session.scalar(select(func.count()).select_from(AlertRule))
    rows = await session.execute(
        select(AlertRule).order_by(AlertRule.id.desc()).limit(limit).offset(offset)
    )
    return list(rows.scalars()), int(total or 0)


async def set_enabled(db: Database, rule_id: int, enabled: bool) -> AlertRule:
    async with db.session() as session:
        rule = await get_rule(session, rule_id)
        if rule.enabled != enabled:
            rule.enabled = enabled
            audit.record(session, "alert_rule", [rule_id], "enabled" if enabled else "disabled")
        await session.flush()
        await session.refresh(rule)
    return rule


async def delete_rule(db: Database, rule_id: int) -> None:
    async with db.session() as session:
        rule = await get_rule(session, rule_id)
        await session.execute(delete(AlertRule).where(AlertRule.id == rule_id))
        audit.record(session, "alert_rule", [rule_id], "deleted", {"name": rule.name})


async def list_deliveries(
    session: AsyncSession,
    *,
    rule_id: int | None,
    status: str | None,
    limit: int,
    offset: int,
) -> tuple[Sequence[AlertDelivery], int]:
    where = []
    if rule_id is not None:
        where.append(AlertDelivery.rule_id == rule_id)
    if status is not None:
        where.append(AlertDelivery.status == status)
    total = await session.scalar(select(func.count()).select_from(AlertDelivery).where(*where))
    rows = await session.execute(
        select(AlertDelivery)
        .where(*where)
        .order_by(AlertDelivery.id.desc())
        .limit(limit)
        .offset(offset)
    )
    return list(rows.scalars()), int(total or 0)


async def get_delivery(
    session: AsyncSession, delivery_id: int
) -> tuple[AlertDelivery, Sequence[AlertAttempt]]:
    missing = f"no alert delivery {delivery_id}"
    delivery = await get_or_not_found(session, AlertDelivery, delivery_id, missing)
    attempts = await session.execute(
        select(AlertAttempt)
        .where(AlertAttempt.delivery_id == delivery_id)
        .order_by(AlertAttempt.id)
    )
    return delivery, list(attempts.scalars())


async def resend(db: Database, delivery_id: int) -> AlertDelivery:
    """Send a delivery again now, whatever its status, with a fresh count of tries (its
    earlier tries stay in its history)."""
    async with db.session() as session:
        await get_delivery(session, delivery_id)
        await session.execute(
            update(AlertDelivery)
            .where(AlertDelivery.id == delivery_id)
            .values(status="pending", attempts=0, next_attempt_at=utcnow(), delivered_at=None)
            .execution_options(synchronize_session=False)
        )
        audit.record(session, "alert_delivery", [delivery_id], "resend_requested")
    async with db.reader() as session:
        delivery, _ = await get_delivery(session, delivery_id)
        session.expunge(delivery)
    return delivery
