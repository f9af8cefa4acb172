"""A site that refuses plain HTTP clients by their TLS fingerprint, as bot walls do: a loopback
listener reads each ClientHello, relays Chrome's (GREASE values) to the test site behind TLS and
any other to a server answering every request with a 403 block page. ``everyone = True`` lets
every client through (the site stopped checking)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.proxy import LoopbackServer, _close, _pipe
from tests.support.socks import TlsFront
from tests.support.tlshello import parse_client_hello

BLOCK_PAGE = (
    "<!DOCTYPE html><html><head><title>Attention Required!</title></head><body>"
    "<h1>Sorry, you have been blocked</h1><p>This website is using a security service to "
    "protect itself from online attacks.</p></body></html>"
)


class _Refuser(LoopbackServer):
    """TLS on ``port``: every request gets the 403 block page."""

    name = "fingerprint-refuser"

    def __init__(self, tls: TlsFront) -> None:
        super().__init__()
        self.ssl_context = tls.ssl_context

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = BLOCK_PAGE.encode()
        writer.write(
            b"HTTP/1.1 403 Forbidden\r\ncontent-type: text/html; charset=utf-8\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()


class FingerprintGate(LoopbackServer):
    """``with FingerprintGate(site_port, cert_file, key_file) as gate``: HTTPS on
    ``gate.port``; ``gate.seen`` says, per connection, whether its hello was Chrome's."""

    name = "fingerprint-gate"

    def __init__(self, site_port: int, cert_file: Path, key_file: Path) -> None:
        super().__init__()
        self.everyone = False
        self.seen: list[str] = []  # "chrome" or "other", per connection
        self._site = TlsFront(site_port, cert_file, key_file)
        self._refuser = _Refuser(self._site)

    def start(self) -> None:
        self._site.start()
        self._refuser.start()
        super().start()

    def stop(self) -> None:
        super().stop()
        self._refuser.stop()
        self._site.stop()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readexactly(5)
        record = head + await reader.readexactly(int.from_bytes(head[3:5], "big"))
        chrome = parse_client_hello(record).grease
        self.seen.append("chrome" if chrome else "other")
        upstream = self._site if chrome or self.everyone else self._refuser
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream.port)
        try:
            up_writer.write(record)
            await up_writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            await _close(up_writer)
