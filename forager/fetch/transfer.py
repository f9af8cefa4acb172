"""One HTTP exchange through libcurl (curl_cffi's asyncio multi handle), no redirects followed.

The ``http`` and ``impersonate`` fetchers are built on it; they follow redirects themselves, one
``Hop`` at a time, so every hop is checked by the egress policy before it is sent. libcurl is
told not to decode bodies (``HTTP_CONTENT_DECODING`` off): the raw bytes go through
``forager.fetch.decode``'s bounded decoders in the write callback. A redirect's body is never
decoded, only counted, and an error page is kept only up to ``ERROR_BODY_BYTES``. The
connection goes to the address the caller checked (``CONNECT_TO``; libcurl reuses a
connection only for the same pinned address) or to the proxy. No environment proxy is read.

Nothing is ever raised out of a libcurl callback: curl_cffi keeps such an exception on the easy
handle and reports it again for every later transfer on it. A callback records the refusal on
its exchange and aborts the transfer the way libcurl expects (a short count), and ``run`` raises
it afterwards. A handle goes back to the pool only after a transfer that ended well; one that saw
any error is closed, so no refusal can outlive its own response.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import certifi
from curl_cffi import CurlECode, CurlHttpVersion, CurlMOpt, CurlOpt
from curl_cffi._wrapper import ffi, lib  # type: ignore[import-not-found]
from curl_cffi.aio import AsyncCurl
from curl_cffi.curl import CURL_WRITEFUNC_ERROR, CURLINFO_HEADER_OUT, Curl, CurlError
from curl_cffi.requests.impersonate import resolve_latest_browser_type

from forager.config import Settings
from forager.errors import FetchError, FetchTimeout, NetworkError, ProxyError, TooLarge
from forager.fetch.decode import BoundedDecoder

ERROR_BODY_BYTES = 64 * 1024  # the start of an error page: enough to tell a block page
REDIRECT_BODY_BYTES = 64 * 1024  # read (never decoded) so the connection can be reused
_IDLE_HANDLES = 256
log = logging.getLogger(__name__)
_IDLE_CONNECTIONS = 1024  # at most; a quarter of the file-descriptor limit when that is lower


def _idle_connections() -> int:
    """Idle connections the multi handle may keep open for reuse."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _IDLE_CONNECTIONS
    return max(16, min(_IDLE_CONNECTIONS, soft // 4))


_CONNECTION_ERRORS = frozenset(
    {
        CurlECode.COULDNT_CONNECT,
        CurlECode.SEND_ERROR,
        CurlECode.RECV_ERROR,
        CurlECode.GOT_NOTHING,
        CurlECode.SSL_CONNECT_ERROR,
        CurlECode.PARTIAL_FILE,
        CurlECode.HTTP2,
        CurlECode.HTTP2_STREAM,
    }
)


@dataclass(slots=True)
class Hop:
    """One request: where, how, and through what."""

    url: str
    headers: list[str]  # "Name: value" lines
    limit: int  # largest decoded body kept
    timeout_seconds: float
    proxy_url: str | None = None
    truncate: bool = False  # keep ``limit`` bytes and stop, instead of failing too_large
    connect_to: str | None = None  # "host:port:address:port", the checked address
    on_headers_out: Callable[[], None] | None = None
    body: bytes | None = None  # sent with POST; None: GET


@dataclass(slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    url: str


@dataclass(slots=True)
class _Exchange:
    """The callbacks' state for one transfer."""

    hop: Hop
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    decoder: BoundedDecoder | None = None  # None for a redirect (its body is not decoded)
    started: bool = False
    wire: int = 0
    stopped: bool = False  # we ended the body on purpose (enough of an error or redirect page)
    refused: FetchError | None = None  # what a callback refused, raised once the transfer ends

    def header(self, line: bytes) -> int:
        try:
            return self._header(line)
        except Exception as exc:  # never into libcurl: see the module docstring
            return self._refuse(exc)

    def body(self, chunk: bytes) -> int:
        try:
            return self._body(chunk)
        except Exception as exc:  # never into libcurl: see the module docstring
            return self._refuse(exc)

    def _refuse(self, exc: Exception) -> int:
        if not isinstance(exc, FetchError):
            exc = FetchError(f"unreadable response: {exc!r}", error_type="network")
        self.refused = exc
        return int(CURL_WRITEFUNC_ERROR)

    def _header(self, line: bytes) -> int:
        text = line.decode("latin-1").rstrip("\r\n")
        if text.startswith("HTTP/"):
            parts = text.split(" ", 2)
            self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            self.headers = {}
        elif ":" in text:
            name, _, value = text.partition(":")
            key, value = name.strip().lower(), value.strip()
            old = self.headers.get(key)
            self.headers[key] = value if old is None else f"{old}, {value}"
        return len(line)

    def _body(self, chunk: bytes) -> int:
        if not self.started:
            self._start()
        self.wire += len(chunk)
        if self.decoder is None:  # a redirect: counted, never decoded
            return self._stop() if self.wire > REDIRECT_BODY_BYTES else len(chunk)
        try:
            self.decoder.feed(chunk)  # raises TooLarge past its limit, unless truncating
        except TooLarge:
            if self.status < 400:
                raise
            return self._stop()  # the start of an error page is all we keep
        return self._stop() if self.decoder.truncated else len(chunk)

    def _start(self) -> None:
        self.started = True
        if 300 <= self.status < 400 and "location" in self.headers:
            return
        limit = self.hop.limit if self.status < 400 else ERROR_BODY_BYTES
        self.decoder = BoundedDecoder(
            self.headers.get("content-encoding", ""), limit, truncate=self.hop.truncate
        )

    def _stop(self) -> int:
        self.stopped = True
        return int(CURL_WRITEFUNC_ERROR)

    def answer(self) -> Answer:
        body = b""
        if self.decoder is not None:
            body = self.decoder.partial() if self.stopped else self.decoder.finish()
        return Answer(self.status, self.headers, body, self.hop.url)


def _long(value: int) -> Any:
    return ffi.new("long*", value)


class _Handle:
    """An easy handle whose fixed options are set once, when it is made; a transfer sets only
    what differs (URL, headers, limit, deadline, proxy, pinned address). Its callbacks hand
    each line and chunk to the current exchange."""

    def __init__(self, transfers: Transfers) -> None:
        s = transfers.settings
        self.curl = curl = Curl()
        self.c = curl._curl
        self.exchange: _Exchange | None = None
        self.notify: Callable[[], None] | None = None
        # HTTP/2 over TLS only, as browsers do: no cleartext "Upgrade: h2c" offer.
        curl.setopt(CurlOpt.HTTP_VERSION, CurlHttpVersion.V2TLS)
        if transfers.impersonate and curl.impersonate(transfers.impersonate, default_headers=True):
            raise FetchError(f"cannot impersonate {transfers.impersonate!r}", error_type="internal")
        curl.setopt(CurlOpt.HTTP_CONTENT_DECODING, 0)  # bodies are decoded by us, bounded
        curl.setopt(CurlOpt.FOLLOWLOCATION, 0)
        curl.setopt(CurlOpt.PROTOCOLS_STR, "http,https")
        curl.setopt(CurlOpt.NOSIGNAL, 1)
        curl.setopt(CurlOpt.CONNECTTIMEOUT_MS, max(1, int(s.connect_timeout_seconds * 1000)))
        curl.setopt(CurlOpt.CAINFO, transfers.cafile())
        curl.setopt(CurlOpt.PROXY_CAINFO, transfers.cafile())
        curl.setopt(CurlOpt.NOPROXY, "")  # no_proxy from the environment is not read either
        curl.setopt(CurlOpt.PROXY_CREDENTIAL_NO_REUSE, 1)
        curl.setopt(CurlOpt.SUPPRESS_CONNECT_HEADERS, 1)
        curl.setopt(CurlOpt.HEADERFUNCTION, self._header)
        curl.setopt(CurlOpt.WRITEFUNCTION, self._body)
        curl.setopt(CurlOpt.DEBUGFUNCTION, self._debug)
        self.proxy: str | None = "unset"
        self.limit = -1
        self.verbose = False
        self.headers: Any = ffi.NULL
        self.pinned: Any = ffi.NULL

    def _header(self, line: bytes) -> int:
        return 0 if self.exchange is None else self.exchange.header(line)  # 0: abort

    def _body(self, chunk: bytes) -> int:
        return 0 if self.exchange is None else self.exchange.body(chunk)

    def _debug(self, kind: int, _data: bytes) -> None:
        if kind == CURLINFO_HEADER_OUT and self.notify is not None:
            notify, self.notify = self.notify, None
            try:
                notify()
            except Exception as exc:  # never into libcurl: see the module docstring
                log.error("the request-sent hook failed: %r", exc)

    def prepare(self, hop: Hop, exchange: _Exchange) -> None:
        """Set this transfer's options (the lists libcurl reads are freed by ``done``)."""
        c = self.c
        self.exchange = exchange
        lib._curl_easy_setopt(c, CurlOpt.URL, hop.url.encode())
        self.headers = ffi.NULL
        for line in hop.headers:
            self.headers = lib.curl_slist_append(self.headers, line.encode("latin-1"))
        lib._curl_easy_setopt(c, CurlOpt.HTTPHEADER, self.headers)
        if hop.body is not None:  # a POST: libcurl copies the body (it may hold a NUL)
            lib._curl_easy_setopt(
                c, CurlOpt.POSTFIELDSIZE_LARGE, ffi.new("int64_t*", len(hop.body))
            )
            lib._curl_easy_setopt(c, CurlOpt.COPYPOSTFIELDS, hop.body)
        else:  # the handle may have posted before
            lib._curl_easy_setopt(c, CurlOpt.HTTPGET, _long(1))
        lib._curl_easy_setopt(c, CurlOpt.TIMEOUT_MS, _long(max(1, int(hop.timeout_seconds * 1000))))
        limit = max(hop.limit, ERROR_BODY_BYTES)
        if limit != self.limit:
            lib._curl_easy_setopt(c, CurlOpt.MAXFILESIZE_LARGE, ffi.new("int64_t*", limit))
            self.limit = limit
        if hop.proxy_url != self.proxy:
            lib._curl_easy_setopt(c, CurlOpt.PROXY, (hop.proxy_url or "").encode())  # "": none
            self.proxy = hop.proxy_url
        tunnel = bool(hop.proxy_url) and hop.url.startswith("https:")
        tunnel = tunnel and not (hop.proxy_url or "").startswith("socks")
        lib._curl_easy_setopt(c, CurlOpt.HTTPPROXYTUNNEL, _long(int(tunnel)))
        self.notify = hop.on_headers_out
        # curl reports to DEBUGFUNCTION only when verbose: costly, so only when asked.
        if (hop.on_headers_out is not None) != self.verbose:
            self.verbose = not self.verbose
            lib._curl_easy_setopt(c, CurlOpt.VERBOSE, _long(int(self.verbose)))
        self.pinned = ffi.NULL
        if hop.connect_to is not None:
            self.pinned = lib.curl_slist_append(ffi.NULL, hop.connect_to.encode())
        lib._curl_easy_setopt(c, CurlOpt.CONNECT_TO, self.pinned)

    def done(self) -> None:
        """After a transfer: libcurl lets go of this transfer's lists, then they are freed."""
        self.exchange = None
        self.notify = None
        lib._curl_easy_setopt(self.c, CurlOpt.HTTPHEADER, ffi.NULL)
        lib._curl_easy_setopt(self.c, CurlOpt.CONNECT_TO, ffi.NULL)
        for owned in (self.headers, self.pinned):
            if owned != ffi.NULL:
                lib.curl_slist_free_all(owned)
        self.headers = self.pinned = ffi.NULL


class Transfers:
    """A libcurl multi handle (one connection cache) and a pool of easy handles."""

    def __init__(self, settings: Settings, impersonate: str | None = None) -> None:
        self.settings = settings
        # "chrome" means the newest Chrome curl_cffi knows ("chrome142" …).
        self.impersonate: str | None = (
            resolve_latest_browser_type(impersonate) if impersonate else None  # type: ignore[no-untyped-call]
        )
        self._multi: AsyncCurl | None = None
        self._idle: list[_Handle] = []
        self._ca_file: str | None = None

    def cafile(self) -> str:
        """certifi's authorities plus ``FORAGER_CA_BUNDLE_FILE`` (libcurl takes one file)."""
        if self._ca_file is None:
            extra = self.settings.ca_bundle_file
            if extra is None:
                self._ca_file = certifi.where()
            else:
                fd, path = tempfile.mkstemp(prefix="forager-ca-", suffix=".pem")
                with os.fdopen(fd, "wb") as out:
                    out.write(Path(certifi.where()).read_bytes() + b"\n" + extra.read_bytes())
                self._ca_file = path
        return self._ca_file

    async def run(self, hop: Hop) -> Answer:
        """Send ``hop`` and read its answer (body bounded as the module docstring says)."""
        if self._multi is None:
            self._multi = AsyncCurl()
            # Left to its default cache size, libcurl closed idle connections a crawl over
            # several hosts would have used again: ~2,500 connections for 3,000 pages on ten
            # hosts, ~500 with this (strace). curl_cffi's own setopt passes the long as a
            # pointer, which libcurl ignores: here the value goes as the pointer itself.
            lib.curl_multi_setopt(
                self._multi._curlm, CurlMOpt.MAXCONNECTS, ffi.cast("void *", _idle_connections())
            )
        multi = self._multi
        handle = self._idle.pop() if self._idle else _Handle(self)
        exchange = _Exchange(hop)
        handle.prepare(hop, exchange)
        ended_well = False  # only then does the handle go back to the pool
        try:
            try:
                await multi.add_handle(handle.curl)
            except CurlError as exc:
                if exchange.refused is not None:
                    raise exchange.refused from None
                if not (exchange.stopped and exc.code == CurlECode.WRITE_ERROR):
                    raise _classify(exc, hop) from exc
            answer = exchange.answer()
            ended_well = handle.curl._get_callback_exception() is None  # belt and braces
            return answer
        finally:
            with contextlib.suppress(CurlError):
                multi.remove_handle(handle.curl)
            handle.done()
            if ended_well and len(self._idle) < _IDLE_HANDLES:
                self._idle.append(handle)
            else:
                handle.curl.close()

    async def aclose(self) -> None:
        multi, self._multi = self._multi, None
        if multi is not None:
            await multi.close()  # type: ignore[no-untyped-call]
        for handle in self._idle:
            handle.curl.close()
        self._idle.clear()
        if self._ca_file is not None and self._ca_file != certifi.where():
            with contextlib.suppress(OSError):
                os.unlink(self._ca_file)
        self._ca_file = None


def _classify(exc: CurlError, hop: Hop) -> FetchError:
    """A libcurl failure as the fetch error it stands for."""
    code: Any = exc.code
    detail = str(exc).split(" See https://", 1)[0] or type(exc).__name__
    via_proxy = hop.proxy_url is not None
    if code == CurlECode.FILESIZE_EXCEEDED:
        return TooLarge(f"body exceeds the {hop.limit} byte limit (declared size)")
    if code == CurlECode.TOO_LARGE:  # e.g. more response headers than libcurl accepts
        return TooLarge(f"response too large: {detail}")
    if code == CurlECode.COULDNT_CONNECT and not via_proxy:
        return NetworkError(f"Connection failed: {detail}")
    if code == CurlECode.OPERATION_TIMEDOUT:
        return FetchTimeout(f"timed out: {detail}")
    if code in (CurlECode.COULDNT_RESOLVE_PROXY, CurlECode.PROXY):
        return ProxyError(f"proxy failed: {detail}")
    if code in (CurlECode.UNSUPPORTED_PROTOCOL, CurlECode.URL_MALFORMAT):
        if via_proxy:
            return ProxyError(f"unusable proxy URL: {detail}")
        return NetworkError(f"unusable URL: {detail}")
    if via_proxy and code in _CONNECTION_ERRORS:
        # The connection is to the proxy: a refusal or reset there is the proxy's fault.
        return ProxyError(f"proxy connection failed: {detail}")
    return NetworkError(f"network error: {detail}")
