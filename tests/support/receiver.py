"""A real HTTP receiver on loopback for webhook tests: records every request and answers with
the next scripted status (200 when the script is empty), optionally after a delay; over TLS
when given an ``ssl`` server context."""

from __future__ import annotations

import asyncio
import ssl as _ssl
from dataclasses import dataclass, field


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=list)
    delay: float = 0.0
    requests: list[Received] = field(default_factory=list)
    server: asyncio.Server | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    ssl: _ssl.SSLContext | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"{'https' if self.ssl else 'http'}://127.0.0.1:{port}/hook"

    async def __aenter__(self) -> Receiver:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")[1:]
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines if x)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append(Received(headers, body))
            self.arrived.set()
            if self.delay:
                await asyncio.sleep(self.delay)
            status = self.statuses.pop(0) if self.statuses else 200
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, _ssl.SSLError):
            pass
        finally:
            writer.close()
