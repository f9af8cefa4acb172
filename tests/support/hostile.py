"""A loopback HTTP server of every answer the transfer layer refuses, beside a good page.

``/ok`` is a small good page and ``/to-ok`` a redirect to it; each refusal has a path of its
own (``REFUSALS`` maps them to the error type a fetch of them ends in)::

    with HostileServer() as hostile:
        url = hostile.url("/bogus-encoding")

Bodies decode to at most ``BOMB_MIB`` MiB, so the tests use a body limit below that.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import zlib

from tests.support.bombs import bomb
from tests.support.proxy import LoopbackServer

OK_PAGE = (
    b'<html><head><title>Kettle</title><script type="application/ld+json">'
    b'{"@context": "https://schema.org", "@type": "Product", "name": "Kettle", "sku": "K1",'
    b' "offers": {"@type": "Offer", "price": "19.90", "priceCurrency": "EUR"}}'
    b"</script></head><body><h1>Kettle</h1></body></html>"
)
BOMB_MIB = 8
SLOW_SECONDS = 30  # far past any fetch deadline the tests set

# path -> the error type the fetch ends in
REFUSALS = {
    "/too-big": "too_large",
    "/bomb-gzip": "too_large",
    "/bomb-deflate": "too_large",
    "/bomb-br": "too_large",
    "/bomb-zstd": "too_large",
    "/bomb-stacked": "too_large",
    "/bogus-encoding": "network",
    "/too-many-encodings": "network",
    "/corrupt-gzip": "network",
    "/corrupt-brotli": "network",
    "/many-headers": "too_large",
    "/reset-mid-body": "network",
    "/slow": "timeout",
}


class HostileServer(LoopbackServer):
    """The server of the module docstring; one request per connection."""

    name = "hostile-server"

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        path = head.split(b" ", 2)[1].decode()
        self.paths.append(path)
        path = path.split("?", 1)[0] if path.startswith("/ok") else path
        headers = {"Content-Type": "text/html"}
        body, status = OK_PAGE, 200
        if path.startswith("/ok"):
            pass
        elif path == "/to-ok":
            status, headers["Location"], body = 302, "/ok", b""
        elif path == "/too-big":
            body = b"x" * (BOMB_MIB * 1024 * 1024)
        elif path.startswith("/bomb-"):
            coding = path.removeprefix("/bomb-")
            codings = ("gzip", "gzip") if coding == "stacked" else (coding,)
            body = await asyncio.to_thread(bomb, codings, BOMB_MIB)
            headers["Content-Encoding"] = ", ".join(codings)
        elif path == "/bogus-encoding":
            body, headers["Content-Encoding"] = b"hello", "bogus"
        elif path == "/too-many-encodings":
            headers["Content-Encoding"] = "gzip, gzip, gzip, gzip, gzip"
            body = zlib.compress(OK_PAGE, 6, 31)
        elif path == "/corrupt-gzip":
            body, headers["Content-Encoding"] = b"\x1f\x8b\x08\x00garbage" * 40, "gzip"
        elif path == "/corrupt-brotli":
            body, headers["Content-Encoding"] = b"\xff\xfe not brotli at all" * 40, "br"
        elif path == "/many-headers":
            headers |= {f"X-Filler-{n}": "y" * 40 for n in range(20_000)}
        elif path == "/reset-mid-body":
            return await _reset_mid_body(writer)
        elif path == "/slow":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
            await writer.drain()
            await asyncio.sleep(SLOW_SECONDS)
            return None
        lines = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in headers.items())]
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        writer.write("\r\n".join(lines).encode() + body)
        await writer.drain()
        return None


async def _reset_mid_body(writer: asyncio.StreamWriter) -> None:
    """Half a promised body, then a TCP reset (SO_LINGER 0 makes close send RST)."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"<p>" * 1000)
    await writer.drain()
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
