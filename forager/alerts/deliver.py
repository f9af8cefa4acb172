"""The delivery loop: sends what the outbox holds, records every try, retries with backoff.

A step claims up to ``_BATCH`` due deliveries with one compare-and-set each on
``next_attempt_at`` (pushed past the try's timeout: that is the lease, so two processes never
send the same try and a process that dies mid-send leaves it due again), sends them
concurrently and records each try (``alert_attempts``) with the receiver's status code or the
error. A failed try is due again after ``FORAGER_ALERT_RETRY_BASE_SECONDS · 2^(tries-1)``
(capped by ``FORAGER_ALERT_RETRY_MAX_SECONDS``); after ``FORAGER_ALERT_MAX_ATTEMPTS`` tries the
delivery is ``failed``. Nothing is held in memory between steps: a restart loses none.

It runs as a side task of every worker pool that runs the scheduler (``serve`` and each
``forager worker``), stopped between steps like the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import insert, select, update

from forager.alerts import people, webhook
from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import AlertAttempt, AlertDelivery, AlertRule
from forager.db.types import utcnow
from forager.errors import ConfigError
from forager.fetch.egress import Resolver
from forager.fetch.gateway import trusting

if TYPE_CHECKING:  # imported at the first webhook sent: most processes send none
    import httpx

log = logging.getLogger(__name__)
_BATCH = 32
_D = AlertDelivery


def retry_delay(settings: Settings, attempts: int) -> float:
    """Seconds before the next try after ``attempts`` failed ones."""
    base = settings.alert_retry_base_seconds * 2 ** max(0, attempts - 1)
    return float(min(settings.alert_retry_max_seconds, base))


class Deliverer:
    """Sends due deliveries; ``step`` is one pass (the side task calls it every poll)."""

    def __init__(self, db: Database, settings: Settings, box: SecretBox) -> None:
        self.db = db
        self.settings = settings
        self.box = box
        self.resolver = Resolver()
        self._client: httpx.AsyncClient | None = None

    async def step(self) -> int:
        """Send every delivery due now (in batches); how many were tried."""
        tried = 0
        while True:
            claimed = await self._claim()
            if not claimed:
                return tried
            await asyncio.gather(*(self._send(d, rule, lease) for d, rule, lease in claimed))
            tried += len(claimed)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _claim(self) -> list[tuple[AlertDelivery, AlertRule, datetime]]:
        now = utcnow()
        lease = now + timedelta(seconds=self.settings.alert_timeout_seconds + 30)
        async with self.db.session() as session:
            due = (
                await session.execute(
                    select(_D, AlertRule)
                    .join(AlertRule, AlertRule.id == _D.rule_id)
                    .where(_D.status == "pending", _D.next_attempt_at <= now)
                    .order_by(_D.next_attempt_at, _D.id)
                    .limit(_BATCH)
                )
            ).all()
            claimed = []
            for delivery, rule in due:
                moved = await session.execute(
                    update(_D)
                    .where(
                        _D.id == delivery.id,
                        _D.status == "pending",
                        _D.next_attempt_at == delivery.next_attempt_at,
                    )
                    .values(next_attempt_at=lease)
                    .execution_options(synchronize_session=False)
                )
                if getattr(moved, "rowcount", 0):
                    claimed.append((delivery, rule, lease))
            session.expunge_all()
        return claimed

    async def _send(self, delivery: AlertDelivery, rule: AlertRule, lease: datetime) -> None:
        started = utcnow()
        clock = time.monotonic()
        try:
            outcome = await self._try(delivery, rule)
        except ConfigError as exc:  # a secret that cannot be decrypted: say so, retry later
            outcome = webhook.Outcome(None, str(exc))
        elapsed = int((time.monotonic() - clock) * 1000)
        attempts = delivery.attempts + 1
        values: dict[str, object] = {
            "attempts": attempts,
            "last_status_code": outcome.status_code,
            "last_error": outcome.error,
        }
        if outcome.ok:
            values |= {"status": "delivered", "delivered_at": utcnow()}
        elif attempts >= self.settings.alert_max_attempts:
            values |= {"status": "failed"}
        else:
            values |= {
                "next_attempt_at": utcnow()
                + timedelta(seconds=retry_delay(self.settings, attempts))
            }
        async with self.db.session() as session:
            await session.execute(
                insert(AlertAttempt).values(
                    delivery_id=delivery.id,
                    started_at=started,
                    duration_ms=elapsed,
                    status_code=outcome.status_code,
                    error=outcome.error,
                )
            )
            await session.execute(
                update(_D)
                .where(_D.id == delivery.id, _D.next_attempt_at == lease)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
        if not outcome.ok:
            log.info(
                "alert delivery %d (rule %d) try %d failed: %s",
                delivery.id,
                rule.id,
                attempts,
                outcome.error,
            )

    async def _try(self, delivery: AlertDelivery, rule: AlertRule) -> webhook.Outcome:
        target = self.box.decrypt(rule.target_enc)
        timeout = self.settings.alert_timeout_seconds
        if rule.channel == "apprise":
            return await people.notify(
                target,
                delivery.payload,
                seconds=timeout,
                private_targets=self.settings.private_targets,
            )
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(
                follow_redirects=False,
                trust_env=False,
                verify=trusting(self.settings.alert_ca_file),
            )
        return await webhook.post(
            self._client,
            self.resolver,
            url=target,
            secret=None if rule.secret_enc is None else self.box.decrypt(rule.secret_enc),
            event=delivery.event,
            delivery_id=delivery.id,
            payload=delivery.payload,
            private_targets=self.settings.private_targets,
            seconds=timeout,
        )
