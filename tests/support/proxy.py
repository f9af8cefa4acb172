"""A small HTTP forward proxy on loopback, for tests of Forager's proxy support.

Handles absolute-form requests (``GET http://127.0.0.1:PORT/path HTTP/1.1``, forwarded and
answered with ``Connection: close``) and ``CONNECT host:port`` tunnels. Only loopback
targets are allowed (others get 403). Optional Basic auth (407 without it)::

    with TestProxy(username="u", password="p") as proxy:
        httpx.get(site.url("/product/1"), proxy=proxy.url)
        assert proxy.requests == [site.url("/product/1")]
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import socket
import ssl
import threading
from urllib.parse import quote, urlsplit

from tests.support.running import Running

# Headers that describe one hop and are never forwarded.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    407: "Proxy Authentication Required",
    501: "Not Implemented",
    502: "Bad Gateway",
}


class _Refused(Exception):
    """Answer the client with this status and close."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _parse_head(head: bytes) -> tuple[str, str, list[tuple[str, str]]]:
    """(method, target, headers) of a request head; raises ``_Refused(400)`` if malformed."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise _Refused(400)
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _Refused(400)
        headers.append((name.strip(), value.strip()))
    return parts[0].upper(), parts[1], headers


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in headers if k.lower() == name), None)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close the destination."""
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


class LoopbackServer(Running):
    """A TCP server on 127.0.0.1 served from a thread with its own event loop.

    Subclasses implement ``handle``; every open stream is closed on ``stop`` (closing them ends
    every handler normally: cancelling instead makes Python 3.11's start_server log an error).
    """

    __test__ = False  # not a pytest test class
    name = "loopback-server"

    def __init__(self) -> None:
        self.port = 0
        self.ssl_context: ssl.SSLContext | None = None
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()  # every open stream, to close on stop

    def start(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(256)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)
        self._thread.name = self.name
        self._thread.start()
        if not self._ready.wait(10):
            self.stop()
            raise RuntimeError(f"{self.name} did not start")

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)
        if self._sock is not None:
            self._sock.close()
        self._thread = self._sock = None

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._run, sock=self._sock, ssl=self.ssl_context)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            for writer in list(self._writers):
                writer.close()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await server.wait_closed()

    async def _run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            await self.handle(reader, writer)
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ssl.SSLError,
            OSError,
        ):
            pass
        finally:
            self._handlers.discard(task)
            self._writers.discard(writer)
            await _close(writer)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def relay(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int
    ) -> None:
        """Pipe both ways between the client and ``host:port`` until both sides are done."""
        up_reader, up_writer = await asyncio.open_connection(host, port)
        self._writers.add(up_writer)
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._writers.discard(up_writer)
            await _close(up_writer)


class TestProxy(LoopbackServer):
    """The proxy, served from a background thread with its own event loop."""

    name = "test-proxy"

    def __init__(
        self, username: str | None = None, password: str | None = None, *, fail: bool = False
    ) -> None:
        super().__init__()
        self.username = username
        self.password = password
        self.fail = fail  # when True, each request is read and left unanswered; toggle any time
        self.requests: list[str] = []  # forwarded URLs, and "host:port" for CONNECT tunnels
        self.rejected = 0  # connections refused: fail mode, bad auth, non-loopback, errors

    # addresses and records

    @property
    def url(self) -> str:
        """``http://[user:pass@]127.0.0.1:PORT``, ready for httpx's ``proxy=``."""
        auth = ""
        if self.username is not None:
            auth = f"{quote(self.username, safe='')}:{quote(self.password or '', safe='')}@"
        return f"http://{auth}127.0.0.1:{self.port}"

    @property
    def count(self) -> int:
        """How many requests were forwarded or tunnelled."""
        return len(self.requests)

    def reset(self) -> None:
        self.requests = []
        self.rejected = 0

    # one client connection

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if self.fail:
                # Read the request, then hang up without an answer: a clean close, never an
                # RST (which a client would read as the site dropping it, not the proxy failing).
                self.rejected += 1
                return
            method, target, headers = _parse_head(head)
            self._check_auth(headers)
            if method == "CONNECT":
                await self._tunnel(target, reader, writer)
            else:
                await self._forward(method, target, headers, reader, writer)
        except _Refused as refused:
            self.rejected += 1
            await self._answer(writer, refused.status)

    def _check_auth(self, headers: list[tuple[str, str]]) -> None:
        if self.username is None:
            return
        expected = base64.b64encode(f"{self.username}:{self.password or ''}".encode()).decode()
        scheme, _, credentials = (_header(headers, "proxy-authorization") or "").partition(" ")
        if scheme.lower() != "basic" or credentials.strip() != expected:
            raise _Refused(407)

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int) -> None:
        extra = 'Proxy-Authenticate: Basic realm="forager-test"\r\n' if status == 407 else ""
        body = f"{status} {_REASONS.get(status, 'Error')}\n".encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n{extra}"
            f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        with contextlib.suppress(ConnectionError):
            writer.write(head.encode() + body)
            await writer.drain()

    async def _connect(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if not _is_loopback(host):
            raise _Refused(403)
        try:
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), port)
        except OSError:
            raise _Refused(502) from None
        self._writers.add(up_writer)
        return up_reader, up_writer

    async def _tunnel(
        self, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise _Refused(400)
        up_reader, up_writer = await self._connect(host, int(port))
        self.requests.append(target)
        try:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._writers.discard(up_writer)
            await _close(up_writer)

    async def _forward(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            raise _Refused(400)
        if (_header(headers, "transfer-encoding") or "").lower() not in ("", "identity"):
            raise _Refused(501)  # chunked request bodies: not needed by any test
        try:
            length = int(_header(headers, "content-length") or 0)
        except ValueError:
            raise _Refused(400) from None
        body = await reader.readexactly(length) if length > 0 else b""
        up_reader, up_writer = await self._connect(url.hostname, url.port or 80)
        self.requests.append(target)
        try:
            dropped = _HOP_BY_HOP | {
                token.strip().lower() for token in (_header(headers, "connection") or "").split(",")
            }
            kept = [(k, v) for k, v in headers if k.lower() not in dropped]
            if _header(kept, "host") is None:
                kept.insert(0, ("Host", url.netloc.rpartition("@")[2]))
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in kept)]
            lines.append("Connection: close")
            up_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            await up_writer.drain()
            # The upstream closes after its response (Connection: close): relay it verbatim.
            await _pipe(up_reader, writer)
        finally:
            self._writers.discard(up_writer)
            await _close(up_writer)
