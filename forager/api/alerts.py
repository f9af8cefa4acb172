"""Alerts (issue 17): rules (subscriptions) to events, their deliveries, re-sending one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from forager.alerts import admin
from forager.api.alert_schemas import (
    AlertAttemptPublic,
    AlertDeliveryDetail,
    AlertDeliveryPublic,
    AlertRuleCreate,
    AlertRuleCreated,
    AlertRulePublic,
    AlertRuleUpdate,
    DeliveryStatus,
)
from forager.api.deps import MAX_ID, EntityId, PagingDep, ReadSessionDep, RuntimeDep
from forager.api.pages import Page
from forager.db.models import AlertRule

router = APIRouter(prefix="/api/alerts", tags=["alerts"])

_NO_RULE: dict[int | str, dict[str, Any]] = {404: {"description": "No such alert rule."}}
_NO_DELIVERY: dict[int | str, dict[str, Any]] = {404: {"description": "No such delivery."}}


def public(rule: AlertRule) -> AlertRulePublic:
    return AlertRulePublic.model_validate(
        {
            **{c: getattr(rule, c) for c in AlertRulePublic.model_fields if hasattr(rule, c)},
            "target": rule.target_display,
            "signed": rule.secret_enc is not None,
        }
    )


@router.post(
    "/rules",
    operation_id="create_alert_rule",
    status_code=201,
    responses={404: {"description": "No such product, domain, monitor or crawl job."}},
)
async def create_alert_rule(body: AlertRuleCreate, runtime: RuntimeDep) -> AlertRuleCreated:
    """Subscribe to an event; a webhook's signing secret is in this answer only."""
    spec = admin.RuleSpec(
        **body.model_dump(exclude={"webhook_url"}),
        webhook_url=None if body.webhook_url is None else body.webhook_url.strip(),
    )
    rule, secret = await admin.create_rule(
        runtime.db, runtime.box, spec, private_targets=runtime.settings.private_targets
    )
    return AlertRuleCreated(**public(rule).model_dump(), secret=secret)


@router.get("/rules", operation_id="list_alert_rules")
async def list_alert_rules(session: ReadSessionDep, paging: PagingDep) -> Page[AlertRulePublic]:
    """Alert rules, newest first."""
    rows, total = await admin.list_rules(session, paging.limit, paging.offset)
    return Page(
        items=[public(r) for r in rows], total=total, limit=paging.limit, offset=paging.offset
    )


@router.get("/rules/{rule_id:int}", operation_id="get_alert_rule", responses=_NO_RULE)
async def get_alert_rule(rule_id: EntityId, session: ReadSessionDep) -> AlertRulePublic:
    return public(await admin.get_rule(session, rule_id))


@router.patch("/rules/{rule_id:int}", operation_id="update_alert_rule", responses=_NO_RULE)
async def update_alert_rule(
    rule_id: EntityId, body: AlertRuleUpdate, runtime: RuntimeDep
) -> AlertRulePublic:
    """Switch a rule on or off."""
    return public(await admin.set_enabled(runtime.db, rule_id, body.enabled))


@router.delete(
    "/rules/{rule_id:int}", operation_id="delete_alert_rule", status_code=204, responses=_NO_RULE
)
async def delete_alert_rule(rule_id: EntityId, runtime: RuntimeDep) -> Response:
    """Delete the rule and its deliveries."""
    await admin.delete_rule(runtime.db, rule_id)
    return Response(status_code=204)


@router.get("/deliveries", operation_id="list_alert_deliveries")
async def list_alert_deliveries(
    session: ReadSessionDep,
    paging: PagingDep,
    rule_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="Of this rule.")] = None,
    status: Annotated[DeliveryStatus | None, Query(description="In this status.")] = None,
) -> Page[AlertDeliveryPublic]:
    """Deliveries (the outbox and its history), newest first."""
    rows, total = await admin.list_deliveries(
        session, rule_id=rule_id, status=status, limit=paging.limit, offset=paging.offset
    )
    return Page(
        items=[AlertDeliveryPublic.model_validate(d) for d in rows],
        total=total,
        limit=paging.limit,
        offset=paging.offset,
    )


@router.get(
    "/deliveries/{delivery_id:int}", operation_id="get_alert_delivery", responses=_NO_DELIVERY
)
async def get_alert_delivery(delivery_id: EntityId, session: ReadSessionDep) -> AlertDeliveryDetail:
    """One delivery with every try: status code or error, and how long it took."""
    delivery, attempts = await admin.get_delivery(session, delivery_id)
    return AlertDeliveryDetail(
        **AlertDeliveryPublic.model_validate(delivery).model_dump(),
        history=[AlertAttemptPublic.model_validate(a) for a in attempts],
    )


@router.post(
    "/deliveries/{delivery_id:int}/resend",
    operation_id="resend_alert_delivery",
    responses=_NO_DELIVERY,
)
async def resend_alert_delivery(delivery_id: EntityId, runtime: RuntimeDep) -> AlertDeliveryPublic:
    """Send it again at the delivery loop's next look (a fresh count of tries)."""
    return AlertDeliveryPublic.model_validate(await admin.resend(runtime.db, delivery_id))
