"""Every alert delivery is bounded (issue 30): a receiver that trickles its reply or answers
without end costs one failed try with its reason, never more memory than a few KB or a second
send; Apprise targets obey the egress policy like webhooks. Real receivers on loopback only:
link-local and metadata targets are refused before any connection is made."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from forager.alerts.deliver import Deliverer
from forager.crypto import SecretBox
from tests.support.waiting import eventually
from tests.test_alerts_delivery import _queued, _run_until, _state

ONE_TRY = {"alert_max_attempts": 1, "alert_retry_base_seconds": 0.05}
HUGE = 256 * 1024 * 1024
CHUNK = 64 * 1024


@dataclass
class Misbehaving:
    """A receiver on loopback that reads each request whole, then answers badly:
    ``trickle`` sends a status line and then one header byte every 0.1 s (each read is quick,
    the whole never ends in time); ``huge`` answers 200 with a chunked body of ``HUGE`` bytes."""

    mode: str
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
            if self.mode == "trickle":
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
