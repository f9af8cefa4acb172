"""The alerts package's tables (``forager.alerts``): rules, deliveries (the outbox) and attempts."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from forager.db.models.base import Base, Timestamped
from forager.db.types import BigId, JsonDoc, Money, UTCDateTime, utcnow


class AlertRule(Timestamped, Base):
    """A subscription (issue 17): which event, on which products or entities, sent where.

    The target (a webhook URL or an Apprise URL) and the webhook's signing secret are stored
    encrypted (``forager.crypto.SecretBox``); ``target_display`` is the masked form shown back.
    """

    __tablename__ = "alert_rules"
    __table_args__ = (
        CheckConstraint("channel IN ('webhook', 'apprise')", name="ck_alert_rules_channel"),
        Index("ix_alert_rules_kind_enabled", "kind", "enabled"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(30))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # price_drop / price_rise: by at least this many percent; price_below / price_above: this.
    percent: Mapped[float | None] = mapped_column(Float)
    threshold: Mapped[Decimal | None] = mapped_column(Money)
    # Noise filter for price rules: a smaller move than either is not a change.
    min_change_abs: Mapped[Decimal | None] = mapped_column(Money)
    min_change_pct: Mapped[float | None] = mapped_column(Float)
    fire_on_first: Mapped[bool] = mapped_column(Boolean, default=False)
    # Scope (all NULL: everything): one product, a domain, a batch of tasks, a tag.
    product_id: Mapped[int | None] = mapped_column(
        ForeignKey("products.id", ondelete="CASCADE"), index=True
    )
    domain_id: Mapped[int | None] = mapped_column(
        ForeignKey("domains.id", ondelete="CASCADE"), index=True
    )
    batch_name: Mapped[str | None] = mapped_column(String(255))
    tag: Mapped[str | None] = mapped_column(String(50))  # products with this tag (0021)
    # Operational kinds (0034): the window a rate is measured over (a monitor's staleness),
    # the fewest attempts in it that make a rate, one monitor, one crawl job. The ids carry no
    # foreign key (like crawl_tasks.job_id): a rule of a deleted one matches nothing.
    window_seconds: Mapped[int | None] = mapped_column(Integer)
    min_attempts: Mapped[int | None] = mapped_column(Integer)
    monitor_id: Mapped[int | None] = mapped_column(BigId)
    job_id: Mapped[int | None] = mapped_column(BigId)
    channel: Mapped[str] = mapped_column(String(10), default="webhook")
    target_enc: Mapped[str] = mapped_column(Text)
    target_display: Mapped[str] = mapped_column(String(300))
    secret_enc: Mapped[str | None] = mapped_column(Text)


class AlertDelivery(Base):
    """The outbox: one notification of one rule, written in the transaction of its change and
    sent (and retried) by the delivery loop; ``next_attempt_at`` doubles as its lease."""

    __tablename__ = "alert_deliveries"
    __table_args__ = (
        CheckConstraint(
            "status IN ('pending', 'delivered', 'failed')", name="ck_alert_deliveries_status"
        ),
        Index("ix_alert_deliveries_due", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    rule_id: Mapped[int] = mapped_column(
        ForeignKey("alert_rules.id", ondelete="CASCADE"), index=True
    )
    event: Mapped[str] = mapped_column(String(30))
    subject_type: Mapped[str] = mapped_column(String(30))
    subject_id: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    status: Mapped[str] = mapped_column(String(10), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class AlertAttempt(Base):
    """One try of a delivery: the receiver's status code, or the error."""

    __tablename__ = "alert_attempts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    delivery_id: Mapped[int] = mapped_column(
        ForeignKey("alert_deliveries.id", ondelete="CASCADE"), index=True
    )
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    duration_ms: Mapped[int] = mapped_column(Integer)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)


class AlertEpisode(Base):
    """Whether an operational rule is firing for one subject (``domain:3``, ``proxies``,
    ``monitor:7`` …): moved by compare-and-set, so a condition fires once per episode and its
    end is told once, whatever the number of processes or restarts (0034)."""

    __tablename__ = "alert_episodes"
    __table_args__ = (
        CheckConstraint("state IN ('firing', 'cleared')", name="ck_alert_episodes_state"),
        UniqueConstraint("rule_id", "subject", name="uq_alert_episodes_rule_subject"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    rule_id: Mapped[int] = mapped_column(ForeignKey("alert_rules.id", ondelete="CASCADE"))
    subject: Mapped[str] = mapped_column(String(300))  # a batch name is up to 255
    state: Mapped[str] = mapped_column(String(10), default="cleared")
    value: Mapped[float | None] = mapped_column(Float)  # the figure when it last moved
    opened_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cleared_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
