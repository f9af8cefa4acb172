"""Every alert delivery is bounded (issue 30): a receiver that trickles its reply or answers
without end costs one failed try with its reason, never more memory than a few KB or a second
send; Apprise targets obey the egress policy like webhooks. Real receivers on loopback only:
link-local and metadata targets are refused before any connection is made."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from forager.alerts import admin
from forager.alerts.admin import RuleSpec
from forager.alerts.deliver import Deliverer
from forager.crypto import SecretBox
from forager.db.models import AlertRule
from forager.errors import InvalidRequest
from tests.support.waiting import eventually
from tests.test_alerts_delivery import _queued, _run_until, _state

ONE_TRY = {"alert_max_attempts": 1, "alert_retry_base_seconds": 0.05}
HUGE = 256 * 1024 * 1024
CHUNK = 64 * 1024


@dataclass
class Misbehaving:
    """A receiver on loopback that reads each request whole, then answers badly:
    ``trickle`` sends a status line and then one header byte every 0.1 s (each read is quick,
    the whole never ends in time); ``huge`` answers 200 with a chunked body of ``HUGE`` bytes;
    ``redirect`` answers 302 to ``location``; ``ok`` answers 200."""

    mode: str
    location: str = ""  # where ``redirect`` sends the client
    requests: int = 0
    sent: int = 0  # body bytes the receiver managed to write before the client hung up
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def __aenter__(self) -> Misbehaving:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            self.requests += 1
            if self.mode in ("ok", "redirect"):
                status = (
                    "200 OK" if self.mode == "ok" else f"302 Found\r\nLocation: {self.location}"
                )
                writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n".encode())
            elif self.mode == "trickle":
                writer.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(100):  # 10 s of headers that never end
                    await writer.drain()
                    await asyncio.sleep(0.1)
                    writer.write(b"a")
                writer.write(b"\r\nContent-Length: 0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                chunk = b"%x\r\n" % CHUNK + b"x" * CHUNK + b"\r\n"
                while self.sent < HUGE:
                    writer.write(chunk)
                    await writer.drain()
                    self.sent += CHUNK
                writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.gone.set()
            writer.close()


async def _open(make_settings: Any, **overrides: Any) -> tuple[Any, Any, Deliverer]:
    from forager.runtime import open_database

    settings = make_settings(**overrides)
    db = await open_database(settings)
    return settings, db, Deliverer(db, settings, SecretBox(settings))


async def test_a_trickling_webhook_receiver_is_one_failed_try_at_the_deadline(
    make_settings: Any,
) -> None:
    settings, db, deliverer = await _open(make_settings, **ONE_TRY, alert_timeout_seconds=0.5)
    try:
        async with Misbehaving("trickle") as receiver:
            delivery_id, _ = await _queued(
                db, settings, webhook_url=f"http://127.0.0.1:{receiver.port}/hook"
            )
            failed = await _run_until(deliverer, db, delivery_id, "failed")
            _, tries = await _state(db, delivery_id)
            assert failed.last_status_code is None
            assert [t.error for t in tries] == ["no answer within 0.5 s"]
            await eventually(receiver.gone.wait, "the receiver hung up on")
            assert receiver.requests == 1
    finally:
        await deliverer.aclose()
        await db.dispose()


async def test_a_webhook_receiver_answering_without_end_is_not_read(make_settings: Any) -> None:
    settings, db, deliverer = await _open(make_settings, **ONE_TRY, alert_timeout_seconds=30)
    try:
        async with Misbehaving("huge") as receiver:
            delivery_id, _ = await _queued(
                db, settings, webhook_url=f"http://127.0.0.1:{receiver.port}/hook"
            )
            delivered = await _run_until(deliverer, db, delivery_id, "delivered")
            assert delivered.last_status_code == 200
            await eventually(receiver.gone.wait, "the receiver hung up on")
            # Only what the sockets' buffers hold ever left the receiver: its reply was not read.
            assert receiver.sent < HUGE // 8, receiver.sent
            assert receiver.requests == 1
    finally:
        await deliverer.aclose()
        await db.dispose()


# -- Apprise ----------------------------------------------------------------------------------


async def _failed_apprise_try(make_settings: Any, url: str, **overrides: Any) -> str:
    """Send one delivery of an Apprise rule to ``url``, saved as it is whatever the setting
    (as if saved before it changed); the error of its one (failed) try."""
    settings, db, deliverer = await _open(make_settings, **ONE_TRY, **overrides)
    try:
        loopback = settings.model_copy(update={"private_targets": "all"})
        delivery_id, _ = await _queued(db, loopback, apprise_url="json://127.0.0.1:9/x")
        async with db.session() as session:
            rule_id = (await _state(db, delivery_id))[0].rule_id
            rule = await session.get(AlertRule, rule_id)
            assert rule is not None
            rule.target_enc = SecretBox(settings).encrypt(url)
        await _run_until(deliverer, db, delivery_id, "failed")
        _, [only] = await _state(db, delivery_id)
        assert only.status_code is None
        return only.error or ""
    finally:
        await deliverer.aclose()
        await db.dispose()


async def test_an_apprise_json_target_reaches_a_loopback_receiver(make_settings: Any) -> None:
    settings, db, deliverer = await _open(make_settings, **ONE_TRY)
    try:
        async with Misbehaving("ok") as receiver:
            url = f"json://127.0.0.1:{receiver.port}/hook"
            delivery_id, _ = await _queued(db, settings, apprise_url=url)
            await _run_until(deliverer, db, delivery_id, "delivered")
            assert receiver.requests == 1
    finally:
        await deliverer.aclose()
        await db.dispose()


async def test_a_private_apprise_target_is_refused_when_saved_and_when_sent(
    make_settings: Any,
) -> None:
    settings, db, deliverer = await _open(make_settings, private_targets="none")
    await deliverer.aclose()
    async with Misbehaving("ok") as receiver:
        url = f"json://127.0.0.1:{receiver.port}/hook"
        try:
            spec = RuleSpec(name="r", kind="agent_blocked", apprise_url=url)
            with pytest.raises(InvalidRequest, match="FORAGER_PRIVATE_TARGETS=none") as refused:
                await admin.create_rule(db, SecretBox(settings), spec, private_targets="none")
            assert refused.value.field == "apprise_url"
        finally:
            await db.dispose()
        error = await _failed_apprise_try(make_settings, url, private_targets="none")
        assert "FORAGER_PRIVATE_TARGETS=none" in error, error
        assert receiver.requests == 0


async def test_an_apprise_redirect_to_another_private_host_is_refused(
    make_settings: Any,
) -> None:
    async with Misbehaving("ok") as inside:
        location = f"http://localhost:{inside.port}/secret"
        async with Misbehaving("redirect", location=location) as receiver:
            error = await _failed_apprise_try(make_settings, f"json://127.0.0.1:{receiver.port}/x")
            assert receiver.requests == 1
    assert "localhost" in error and "only the submitted host may be private" in error, error
    assert inside.requests == 0


@pytest.mark.parametrize(
    "url",
    [
        "json://169.254.169.254/latest/meta-data",
        "xml://[fe80::1]/x",
        "form://100.100.100.200/x",
        "jsons://[::ffff:169.254.169.254]/x",
        "gotify://[64:ff9b:1::a9fe:a9fe]/tokentoken",
    ],
)
async def test_metadata_apprise_targets_are_refused_before_any_connection(
    make_settings: Any, url: str
) -> None:
    settings, db, deliverer = await _open(make_settings, private_targets="all")
    await deliverer.aclose()
    try:
        spec = RuleSpec(name="r", kind="agent_blocked", apprise_url=url)
        with pytest.raises(InvalidRequest, match="link-local or metadata") as refused:
            await admin.create_rule(db, SecretBox(settings), spec, private_targets="all")
        assert refused.value.field == "apprise_url"
    finally:
        await db.dispose()
    # Saved anyway (before this check existed): the send refuses it before connecting.
    error = await _failed_apprise_try(make_settings, url, private_targets="all")
    assert "link-local or metadata" in error, error


async def test_a_trickling_apprise_receiver_is_one_failed_try_at_the_deadline(
    make_settings: Any,
) -> None:
    async with Misbehaving("trickle") as receiver:
        url = f"json://127.0.0.1:{receiver.port}/hook"
        error = await _failed_apprise_try(make_settings, url, alert_timeout_seconds=0.5)
        assert error == "no answer within 0.5 s"
        await eventually(receiver.gone.wait, "the receiver hung up on")
        assert receiver.requests == 1


async def test_an_apprise_receiver_answering_without_end_is_read_a_few_kb_only(
    make_settings: Any,
) -> None:
    async with Misbehaving("huge") as receiver:
        url = f"json://127.0.0.1:{receiver.port}/hook"
        error = await _failed_apprise_try(make_settings, url, alert_timeout_seconds=30)
        assert error == "the reply was longer than 64 KB; not read"
        await eventually(receiver.gone.wait, "the receiver hung up on")
        assert receiver.sent < HUGE // 8, receiver.sent
        assert receiver.requests == 1


async def test_a_metadata_apprise_target_is_a_422_naming_the_field(api: Any) -> None:
    answer = await api.post(
        "/api/alerts/rules",
        json={"name": "r", "kind": "agent_blocked", "apprise_url": "json://169.254.169.254/x"},
    )
    assert answer.status_code == 422, answer.text
    assert [e["field"] for e in answer.json()["errors"]] == ["apprise_url"]
