"""Webhook and Apprise deliveries through the outbox (issue 17), against real receivers on
loopback: signed bodies, a receiver that is up, down, slow or answers 500 then 200, retries
with backoff through the database, every try recorded, re-sending, the egress policy, and
e-mail through Apprise to a real SMTP server."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select

from forager.alerts import admin
from forager.alerts.admin import RuleSpec
from forager.alerts.deliver import Deliverer
from forager.alerts.webhook import signature
from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import AlertAttempt, AlertDelivery
from forager.db.types import utcnow
from tests.support.receiver import Receiver
from tests.support.socks import make_certificates
from tests.support.waiting import eventually

FAST = {"alert_retry_base_seconds": 0.05, "alert_retry_max_seconds": 0.2, "alert_max_attempts": 3}


async def _queued(db: Database, settings: Settings, **target: Any) -> tuple[int, str | None]:
    """A rule and one delivery of it in the outbox; (delivery id, the rule's secret)."""
    rule, secret = await admin.create_rule(
        db,
        SecretBox(settings),
        RuleSpec(name="r", kind="agent_blocked", **target),
        private_targets=settings.private_targets,
    )
    async with db.session() as session:
        delivery_id = await session.scalar(
            insert(AlertDelivery)
            .values(
                rule_id=rule.id,
                event="agent_blocked",
                subject_type="agent",
                subject_id="7",
                payload={"event": "agent_blocked", "agent": {"id": 7, "reason": "captcha"}},
                status="pending",
                attempts=0,
                next_attempt_at=utcnow(),
                created_at=utcnow(),
            )
            .returning(AlertDelivery.id)
        )
    assert delivery_id is not None
    return delivery_id, secret


async def _state(db: Database, delivery_id: int) -> tuple[AlertDelivery, list[AlertAttempt]]:
    async with db.reader() as session:
        return await admin.get_delivery(session, delivery_id)  # type: ignore[return-value]


async def _run_until(
    deliverer: Deliverer, db: Database, delivery_id: int, status: str
) -> AlertDelivery:
    async def done() -> AlertDelivery | None:
        await deliverer.step()
        delivery, _ = await _state(db, delivery_id)
        return delivery if delivery.status == status else None

    found: AlertDelivery = await eventually(done, f"delivery {delivery_id} {status}", timeout=20)
    return found


async def test_a_signed_webhook_reaches_a_receiver_that_answers_500_then_200(
    make_settings: Any,
) -> None:
    settings = make_settings(**FAST)
    from forager.runtime import open_database

    db = await open_database(settings)
    deliverer = Deliverer(db, settings, SecretBox(settings))
    try:
        async with Receiver(statuses=[500]) as receiver:
            delivery_id, secret = await _queued(db, settings, webhook_url=receiver.url)
            delivered = await _run_until(deliverer, db, delivery_id, "delivered")
            assert delivered.attempts == 2 and delivered.last_status_code == 200
            _, tries = await _state(db, delivery_id)
            assert [(t.status_code, t.error) for t in tries] == [
                (500, "the receiver answered 500"),
                (200, None),
            ]
            last = receiver.requests[-1]
            assert secret is not None
            stamp = last.headers["x-forager-timestamp"]
            assert last.headers["x-forager-signature"] == signature(secret, stamp, last.body)
            assert last.headers["x-forager-delivery"] == str(delivery_id)
            body = json.loads(last.body)
            assert body["agent"]["reason"] == "captcha" and body["delivery_id"] == delivery_id
            # Re-sending a delivered one sends it again, with its history kept.
            await admin.resend(db, delivery_id)
            await _run_until(deliverer, db, delivery_id, "delivered")
            assert len(receiver.requests) == 3
            assert len((await _state(db, delivery_id))[1]) == 3
    finally:
        await deliverer.aclose()
        await db.dispose()


async def test_down_and_slow_receivers_are_retried_then_failed(make_settings: Any) -> None:
    settings = make_settings(**FAST, alert_timeout_seconds=0.3)
    from forager.runtime import open_database

    db = await open_database(settings)
    deliverer = Deliverer(db, settings, SecretBox(settings))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: connection refused
    try:
        down, _ = await _queued(db, settings, webhook_url=f"http://127.0.0.1:{port}/hook")
        async with Receiver(delay=2.0) as slow_receiver:
            slow, _ = await _queued(db, settings, webhook_url=slow_receiver.url)
            for delivery_id in (down, slow):
                failed = await _run_until(deliverer, db, delivery_id, "failed")
                assert failed.attempts == 3 and failed.last_status_code is None
            _, down_tries = await _state(db, down)
            _, slow_tries = await _state(db, slow)
        assert all("ConnectError" in (t.error or "") for t in down_tries), down_tries
        assert [t.error for t in slow_tries] == ["no answer within 0.3 s"] * 3
    finally:
        await deliverer.aclose()
        await db.dispose()


async def test_a_private_webhook_target_follows_the_egress_policy(make_settings: Any) -> None:
    settings = make_settings(**FAST, private_targets="none")
    from forager.runtime import open_database

    db = await open_database(settings)
    deliverer = Deliverer(db, settings, SecretBox(settings))
    try:
        async with Receiver() as receiver:
            delivery_id, _ = await _queued(db, settings, webhook_url=receiver.url)
            await _run_until(deliverer, db, delivery_id, "failed")
            assert receiver.requests == []
        _, tries = await _state(db, delivery_id)
        assert "FORAGER_PRIVATE_TARGETS=none" in (tries[0].error or "")
    finally:
        await deliverer.aclose()
        await db.dispose()


async def test_an_https_receiver_is_trusted_through_the_alert_ca_file_only(
    make_settings: Any, tmp_path: Path
) -> None:
    """A receiver whose certificate comes from a CA made here: refused (the TLS error recorded,
    nothing received) until FORAGER_ALERT_CA_FILE names that CA; then delivered, signed."""
    ca_file, cert_file, key_file = make_certificates(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert_file, key_file)
    from forager.runtime import open_database

    untrusting = make_settings(**FAST)
    trusting = make_settings(**FAST, alert_ca_file=ca_file)
    db = await open_database(trusting)
    refusing = Deliverer(db, untrusting, SecretBox(untrusting))
    deliverer = Deliverer(db, trusting, SecretBox(trusting))
    try:
        async with Receiver(ssl=server_tls) as receiver:
            assert receiver.url.startswith("https://127.0.0.1:")
            refused, _ = await _queued(db, trusting, webhook_url=receiver.url)
            failed = await _run_until(refusing, db, refused, "failed")
            assert failed.last_status_code is None and receiver.requests == []
            assert "CERTIFICATE_VERIFY_FAILED" in (failed.last_error or ""), failed.last_error
            _, tries = await _state(db, refused)
            assert len(tries) == 3 and all("ConnectError" in (t.error or "") for t in tries)

            delivery_id, secret = await _queued(db, trusting, webhook_url=receiver.url)
            delivered = await _run_until(deliverer, db, delivery_id, "delivered")
            assert delivered.attempts == 1 and delivered.last_status_code == 200
            [received] = receiver.requests
            assert secret is not None
            stamp = received.headers["x-forager-timestamp"]
            assert received.headers["x-forager-signature"] == signature(
                secret, stamp, received.body
            )
            assert json.loads(received.body)["delivery_id"] == delivery_id
    finally:
        await refusing.aclose()
        await deliverer.aclose()
        await db.dispose()


async def test_the_pool_delivers_what_a_restart_left_in_the_outbox(make_settings: Any) -> None:
    """A delivery queued before this process started is sent by its worker pool's side task."""
    settings = make_settings(**FAST, alert_poll_seconds=0.05)
    from forager.runtime import Runtime

    runtime = await Runtime.open(settings)
    try:
        async with Receiver() as receiver:
            delivery_id, _ = await _queued(runtime.db, settings, webhook_url=receiver.url)
            pool = runtime.worker_pool(0)
            running = asyncio.create_task(pool.run())
            try:
                await eventually(lambda: receiver.requests, "the webhook to arrive", timeout=20)
            finally:
                pool.stop()
                await running
        async with runtime.db.reader() as session:
            status = await session.scalar(
                select(AlertDelivery.status).where(AlertDelivery.id == delivery_id)
            )
        assert status == "delivered"
    finally:
        await runtime.aclose()


async def test_an_email_through_apprise_reaches_a_real_smtp_server(make_settings: Any) -> None:
    from aiosmtpd.smtp import SMTP, AuthResult, Envelope

    settings = make_settings(**FAST)
    mails: list[Envelope] = []
    logins: list[tuple[bytes, bytes]] = []

    class Inbox:
        async def handle_DATA(self, server: Any, session: Any, envelope: Envelope) -> str:
            mails.append(envelope)
            return "250 OK"

    def login(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        logins.append((data.login, data.password))
        return AuthResult(success=True)

    loop = asyncio.get_running_loop()
    smtp = await loop.create_server(
        lambda: SMTP(Inbox(), hostname="localhost", authenticator=login, auth_require_tls=False),
        "127.0.0.1",
        0,
    )
    port = smtp.sockets[0].getsockname()[1]
    url = f"mailto://alerts:pw-s3cret@127.0.0.1:{port}?from=alerts@example.com&to=ops@example.com"
    from forager.runtime import open_database

    db = await open_database(settings)
    deliverer = Deliverer(db, settings, SecretBox(settings))
    try:
        delivery_id, secret = await _queued(db, settings, apprise_url=url)
        assert secret is None  # only webhooks are signed
        await _run_until(deliverer, db, delivery_id, "delivered")
        assert logins == [(b"alerts", b"pw-s3cret")]
        [mail] = mails
        assert mail.rcpt_tos == ["ops@example.com"]
        assert b"Agent blocked" in (mail.content or b"")
        smtp.close()
        await smtp.wait_closed()
        # The server gone: the try fails, and what is recorded names no credential.
        await admin.resend(db, delivery_id)
        await _run_until(deliverer, db, delivery_id, "failed")
        _, tries = await _state(db, delivery_id)
        errors = " ".join(t.error or "" for t in tries[1:])
        assert "Connection error" in errors and "pw-s3cret" not in errors
        async with db.reader() as session:
            rule = await admin.get_rule(session, 1)
        shown = f"mailto://127.0.0.1:{port}/…"
        assert rule.target_display == shown and "pw-s3cret" not in rule.target_enc
    finally:
        await deliverer.aclose()
        await db.dispose()
