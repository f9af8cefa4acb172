"""An ``alert_deliveries`` row (the outbox): one notification of one rule, with its payload."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from forager.db.models import AlertRule


def delivery(
    rule: AlertRule, subject_type: str, subject_id: int | str, data: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """The row of ``rule`` firing for the ``subject_type`` entity ``subject_id`` (``data``)."""
    payload = {
        "event": rule.kind,
        "rule": {"id": rule.id, "name": rule.name},
        "occurred_at": now.isoformat(),
        subject_type: data,
    }
    return {
        "rule_id": rule.id,
        "event": rule.kind,
        "subject_type": subject_type,
        "subject_id": str(subject_id)[:64],
        "payload": payload,
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": now,
        "created_at": now,
    }
