"""The browser's egress gateway: a loopback HTTP proxy every Chromium connection goes through.

Chromium is told to use it for everything, loopback included (``<-loopback>``). Each browser
context gets its own credentials (a *grant*) naming the egress policy of its fetches and the
domain's proxy, if any. For every connection — documents, redirects, subresources, frames
in other processes, workers — the gateway resolves the host once, checks the addresses with
the policy and connects to a checked one, or chains to the domain's proxy (http, https or
socks5, with credentials) after checking the host as a literal and as resolved here. A refused
target gets ``403`` with ``X-Forager-Egress-Denied`` (plain HTTP) or a failed tunnel (HTTPS)
and no connection is made; the browser fetcher turns that into ``EgressDenied``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import secrets
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit

import certifi

from forager.config import Settings
from forager.errors import EgressDenied, FetchError, ProxyError
from forager.fetch.egress import EgressPolicy, Resolver

DENIED_HEADER = "x-forager-egress-denied"
FAILED_HEADER = "x-forager-gateway-error"  # the target (or the proxy) could not be reached
_HEAD_LIMIT = 64 * 1024
_HEAD_SECONDS = 30.0
_DROPPED = frozenset({"proxy-authorization", "proxy-connection", "connection", "keep-alive"})
_BODY_LIMIT = 16 * 1024 * 1024  # a request body the browser sends (a form post)


@dataclass(slots=True)
class Grant:
    """What one browser context may do: its egress policy and the domain's proxy."""

    policy: EgressPolicy
    upstream: str | None
    # host -> (error type, why) for each target the gateway did not reach: egress_denied,
    # proxy (the domain's proxy failed) or network (the site could not be reached).
    refusals: dict[str, tuple[str, str]] = field(default_factory=dict)


def trusting(ca_file: Path | None) -> ssl.SSLContext:
    """Certificate checking against certifi's authorities plus those in ``ca_file``."""
    context = ssl.create_default_context(cafile=certifi.where())
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    return context


def tls_context(settings: Settings) -> ssl.SSLContext:
    """Certificate checking for TLS to a proxy: certifi plus ``FORAGER_CA_BUNDLE_FILE``."""
    return trusting(settings.ca_bundle_file)


class Gateway:
    """The gateway server (see the module docstring); one per browser fetcher."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.resolver = Resolver()
        self._grants: dict[str, tuple[str, Grant]] = {}
        self._server: asyncio.Server | None = None
        self._tls: ssl.SSLContext | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._starting = asyncio.Lock()
        self.port = 0

    async def start(self) -> None:
        async with self._starting:  # concurrent first fetches must not start two servers
            if self._server is None:
                self._server = await asyncio.start_server(
                    self._serve, "127.0.0.1", 0, limit=_HEAD_LIMIT
                )
                self.port = self._server.sockets[0].getsockname()[1]

    @property
    def server(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def grant(self, policy: EgressPolicy, upstream: str | None) -> tuple[str, str, Grant]:
        """New credentials for a browser context: (username, password, grant)."""
        username, password = secrets.token_hex(12), secrets.token_hex(16)
        grant = Grant(policy, upstream)
        self._grants[username] = (password, grant)
        return username, password, grant

    def revoke(self, username: str) -> None:
        self._grants.pop(username, None)

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    # -- one client connection --------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _authorized(self, headers: dict[str, str]) -> Grant | None:
        scheme, _, token = headers.get("proxy-authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, _, password = base64.b64decode(token).decode().partition(":")
        except ValueError:
            return None
        known = self._grants.get(user)
        if known is None or not secrets.compare_digest(known[0], password):
            return None
        return known[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_SECONDS)
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers.append((name.strip(), value.strip()))
        lowered = {k.lower(): v for k, v in headers}
        grant = self._authorized(lowered)
        if grant is None:
            writer.write(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                b'Proxy-Authenticate: Basic realm="forager"\r\nContent-Length: 0\r\n\r\n'
            )
            await writer.drain()
            return
        if method.upper() == "CONNECT":
            host, _, port = target.rpartition(":")
            remote = await self._open_or_answer(writer, grant, host.strip("[]"), int(port))
            if remote is not None:
                try:
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    await _pipe(reader, writer, *remote)
                finally:
                    remote[1].close()
            return
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        kept = [(k, v) for k, v in headers if k.lower() not in _DROPPED]
        upstream = urlsplit(grant.upstream) if grant.upstream else None
        if upstream is not None and upstream.scheme in ("http", "https"):
            # An HTTP proxy gets the absolute URL, as a browser would send it.
            remote = await self._open_or_answer(writer, grant, url.hostname, 0, forward=True)
            line = f"{method} {target} {version}"
            auth = _basic(upstream)
            kept += [("Proxy-Authorization", auth)] if auth else []
        else:
            remote = await self._open_or_answer(writer, grant, url.hostname, url.port or 80)
            path = url.path or "/"
            line = f"{method} {path}{'?' + url.query if url.query else ''} {version}"
        if remote is None:
            return
        try:
            await self._exchange(reader, writer, remote, grant, url.hostname, line, kept)
        finally:
            remote[1].close()

    async def _exchange(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        remote: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        grant: Grant,
        host: str,
        line: str,
        headers: list[tuple[str, str]],
    ) -> None:
        """One plain-HTTP request and its answer; both connections close after it, so a next
        request of the browser can never reach this target without its own check."""
        out = [line, *(f"{k}: {v}" for k, v in headers), "Connection: close", "", ""]
        remote[1].write("\r\n".join(out).encode("latin-1"))
        length = next((v for k, v in headers if k.lower() == "content-length"), "0")
        if length.isdigit() and int(length) > 0:  # a form's body (GET has none)
            remote[1].write(await reader.readexactly(min(int(length), _BODY_LIMIT)))
        answer = await asyncio.wait_for(remote[0].readuntil(b"\r\n\r\n"), _HEAD_SECONDS)
        if grant.upstream is not None and answer.split(b" ", 2)[1:2] == [b"407"]:
            # The proxy's own refusal must not reach Chromium as this gateway's challenge.
            await self._answer(writer, grant, host, ProxyError("proxy refused the credentials"))
            return
        first, *rest = answer.decode("latin-1").split("\r\n")
        kept = [h for h in rest if h and h.split(":", 1)[0].strip().lower() not in _DROPPED]
        writer.write("\r\n".join([first, *kept, "Connection: close", "", ""]).encode("latin-1"))
        with contextlib.suppress(OSError):
            while data := await remote[0].read(65536):
                writer.write(data)
                await writer.drain()

    async def _open_or_answer(
        self,
        writer: asyncio.StreamWriter,
        grant: Grant,
        host: str,
        port: int,
        *,
        forward: bool = False,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection towards ``host``, or None after answering the browser why not."""
        try:
            return await self._open(grant, host, port, forward=forward)
        except (FetchError, OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            await self._answer(writer, grant, host, exc)
            return None

    @staticmethod
    async def _answer(
        writer: asyncio.StreamWriter, grant: Grant, host: str, exc: BaseException
    ) -> None:
        """Tell the browser (and the fetcher, through the grant) why ``host`` was not reached."""
        text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        if isinstance(exc, EgressDenied):
            kind, status, header = "egress_denied", "403 Forbidden", DENIED_HEADER
        else:
            kind = "proxy" if grant.upstream is not None else "network"
            status, header = "502 Bad Gateway", FAILED_HEADER
        grant.refusals[host.lower()] = (kind, text)
        body = text.encode()
        writer.write(
            f"HTTP/1.1 {status}\r\n{header}: {text}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1", "replace")
            + body
        )
        await writer.drain()

    async def _open(
        self, grant: Grant, host: str, port: int, *, forward: bool = False
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        timeout = self.settings.connect_timeout_seconds
        if grant.upstream is None:
            address = await self.resolver.connect_address(grant.policy, host)
            return await asyncio.wait_for(asyncio.open_connection(str(address), port), timeout)
        # Through a proxy the target's address is the proxy's to resolve: checked here first.
        await self.resolver.check_all(grant.policy, host)
        proxy = urlsplit(grant.upstream)
        if not proxy.hostname or proxy.port is None:
            raise ProxyError("unusable proxy URL: no host or port")
        tls = None
        if proxy.scheme == "https":
            tls = self._tls = self._tls or tls_context(self.settings)
        # The proxy's own host is checked too (never link-local or metadata) and pinned.
        proxy_address = await self.resolver.proxy_address(proxy.hostname)
        try:
            stream = await asyncio.wait_for(
                asyncio.open_connection(
                    str(proxy_address),
                    proxy.port,
                    ssl=tls,
                    server_hostname=proxy.hostname if tls else None,
                ),
                timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ProxyError(f"proxy connection failed: {exc or type(exc).__name__}") from exc
        try:
            if proxy.scheme in ("socks5", "socks5h"):
                target = host
                if proxy.scheme == "socks5":  # local resolution: the checked address goes
                    target = str(await self.resolver.connect_address(grant.policy, host))
                await asyncio.wait_for(_socks5(stream, proxy, target, port), timeout)
            elif not forward:
                await asyncio.wait_for(_connect(stream, proxy, host, port), timeout)
        except BaseException:
            stream[1].close()
            raise
        return stream


def _basic(proxy: SplitResult) -> str | None:
    """The ``Proxy-Authorization`` value for the proxy's credentials, if it has any."""
    if not proxy.username:
        return None
    pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


async def _connect(
    stream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    proxy: SplitResult,
    host: str,
    port: int,
) -> None:
    """An HTTP ``CONNECT`` tunnel through the upstream proxy."""
    reader, writer = stream
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    auth = _basic(proxy)
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    lines += [f"Proxy-Authorization: {auth}"] if auth else []
    writer.write(("\r\n".join([*lines, "", ""])).encode("latin-1"))
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1] if head.count(b" ") >= 1 else b""
    if status != b"200":
        if status == b"407":
            raise ProxyError("proxy refused the credentials (407)")
        raise ProxyError(f"proxy refused the tunnel ({status.decode('latin-1') or '?'})")


async def _socks5(
    stream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    proxy: SplitResult,
    host: str,
    port: int,
) -> None:
    """The SOCKS5 handshake (RFC 1928), with username/password (RFC 1929) when given."""
    reader, writer = stream
    username, password = unquote(proxy.username or ""), unquote(proxy.password or "")
    writer.write(b"\x05\x01\x02" if username else b"\x05\x01\x00")
    version, method = await reader.readexactly(2)
    if version != 5 or method == 0xFF:
        raise ProxyError("SOCKS5 proxy accepts none of the offered authentications")
    if method == 2:
        user, word = username.encode(), password.encode()
        writer.write(b"\x01" + bytes([len(user)]) + user + bytes([len(word)]) + word)
        _, status = await reader.readexactly(2)
        if status != 0:
            raise ProxyError("SOCKS5 proxy refused the credentials")
    try:
        packed = ipaddress.ip_address(host).packed
        address = (b"\x01" if len(packed) == 4 else b"\x04") + packed
    except ValueError:
        name = host.encode("idna")
        address = b"\x03" + bytes([len(name)]) + name
    writer.write(b"\x05\x01\x00" + address + port.to_bytes(2, "big"))
    reply = await reader.readexactly(4)
    if reply[1] != 0:
        raise ProxyError(f"SOCKS5 proxy could not connect (reply {reply[1]})")
    skip = {1: 4, 4: 16}.get(reply[3])
    if skip is None:
        skip = (await reader.readexactly(1))[0]
    await reader.readexactly(skip + 2)


async def _pipe(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    remote_reader: asyncio.StreamReader,
    remote_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until either side closes."""

    async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        with contextlib.suppress(OSError):
            sink.close()

    try:
        await asyncio.gather(copy(client_reader, remote_writer), copy(remote_reader, client_writer))
    finally:
        remote_writer.close()
