"""A loopback TLS listener that records each client's ClientHello and, given a certificate, its
HTTP/2 SETTINGS, then hangs up: what a site that tells clients apart by their TLS and HTTP/2
fingerprints (JA3/JA4, Akamai's HTTP/2 fingerprint) sees of a fetcher."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass
from pathlib import Path

# RFC 8701: GREASE values, which Chrome scatters through its lists and plain clients never send.
GREASE = frozenset((n << 8) | n for n in range(0x0A, 0x100, 0x10))
ALPN = 16
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS = 0x4


@dataclass(frozen=True, slots=True)
class ClientHello:
    version: int
    ciphers: tuple[int, ...]
    extensions: tuple[int, ...]
    alpn: tuple[str, ...]

    @property
    def grease(self) -> bool:
        return any(v in GREASE for v in (*self.ciphers, *self.extensions))

    @property
    def ja3_parts(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Ciphers and extensions as JA3 counts them (GREASE left out)."""
        return (
            tuple(c for c in self.ciphers if c not in GREASE),
            tuple(e for e in self.extensions if e not in GREASE),
        )


def parse_client_hello(record: bytes) -> ClientHello:
    """The fields of a TLS handshake record holding a ClientHello (RFC 8446 4.1.2)."""
    if record[0] != 0x16 or record[5] != 0x01:
        raise ValueError("not a TLS ClientHello")
    body = record[9:]
    version = int.from_bytes(body[0:2], "big")
    at = 2 + 32
    at += 1 + body[at]  # session id
    size = int.from_bytes(body[at : at + 2], "big")
    ciphers = tuple(int.from_bytes(body[i : i + 2], "big") for i in range(at + 2, at + 2 + size, 2))
    at += 2 + size
    at += 1 + body[at]  # compression methods
    end = at + 2 + int.from_bytes(body[at : at + 2], "big")
    at += 2
    extensions: list[int] = []
    alpn: tuple[str, ...] = ()
    while at + 4 <= end:
        kind = int.from_bytes(body[at : at + 2], "big")
        length = int.from_bytes(body[at + 2 : at + 4], "big")
        data = body[at + 4 : at + 4 + length]
        extensions.append(kind)
        if kind == ALPN:
            names, i = [], 2
            while i < len(data):
                names.append(data[i + 1 : i + 1 + data[i]].decode("ascii", "replace"))
                i += 1 + data[i]
            alpn = tuple(names)
        at += 4 + length
    return ClientHello(version, ciphers, tuple(extensions), alpn)


def parse_settings(frames: bytes) -> dict[int, int] | None:
    """The first HTTP/2 SETTINGS frame after the client's preface (id -> value), None until it
    has all arrived."""
    if len(frames) < len(_PREFACE) + 9:
        return None
    at = len(_PREFACE)
    length, kind = int.from_bytes(frames[at : at + 3], "big"), frames[at + 3]
    if kind != _SETTINGS:
        raise ValueError("the client's first frame is not SETTINGS")
    payload = frames[at + 9 : at + 9 + length]
    if len(payload) < length:
        return None
    return {
        int.from_bytes(payload[i : i + 2], "big"): int.from_bytes(payload[i + 2 : i + 6], "big")
        for i in range(0, length, 6)
    }


class HelloRecorder:
    """``async with HelloRecorder() as server``: ``server.port``; ``server.hellos`` in order and,
    with a certificate (``cert_file``, ``key_file``), each HTTP/2 client's ``server.settings``."""

    def __init__(self, cert_file: Path | None = None, key_file: Path | None = None) -> None:
        self.hellos: list[ClientHello] = []
        self.settings: list[dict[int, int]] = []
        self.tls: ssl.SSLContext | None = None
        if cert_file is not None and key_file is not None:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(cert_file, key_file)
            self.tls.set_alpn_protocols(["h2", "http/1.1"])
        self.port = 0
        self._server: asyncio.Server | None = None
        self._arrived = asyncio.Event()

    async def __aenter__(self) -> HelloRecorder:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readexactly(5)
            record = head + await reader.readexactly(int.from_bytes(head[3:5], "big"))
            self.hellos.append(parse_client_hello(record))
            self._arrived.set()
            if self.tls is not None:
                await self._read_settings(record, reader, writer)
        except (asyncio.IncompleteReadError, ValueError, IndexError, ssl.SSLError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _read_settings(
        self, record: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Complete the handshake over memory buffers (the hello is already read) and record
        the client's first SETTINGS frame."""
        assert self.tls is not None
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.tls.wrap_bio(incoming, outgoing, server_side=True)
        incoming.write(record)

        async def more() -> None:
            if pending := outgoing.read():
                writer.write(pending)
                await writer.drain()
            data = await reader.read(65536)
            if not data:
                raise ValueError("the client hung up")
            incoming.write(data)

        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await more()
        frames = b""
        while (settings := parse_settings(frames)) is None:
            try:
                frames += tls.read(65536)
            except ssl.SSLWantReadError:
                await more()
        self.settings.append(settings)
