"""Plain HTTP fetching with httpx: timeouts, bounded redirects and bounded bodies.

Bodies are read as a stream and content-decoded here, not by httpx, so that both the
wire size and the decompressed size stop at ``max_body_bytes``: a 200 MB gzip bomb
costs at most the limit in memory, never the 200 MB.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import certifi
import httpx

from forager.config import Settings
from forager.errors import (
    FetchError,
    FetchTimeout,
    HTTPStatusError,
    NetworkError,
    ProxyError,
    TooLarge,
)
from forager.fetch.base import CredentialSafeFetcher, FetchRequest, FetchResponse

_MAX_CLIENTS = 64  # one pooled client per proxy; least recently used ones are closed
_BAN_STATUSES = frozenset({403, 429, 503})  # error answers whose body may be a block page
_ERROR_BODY_BYTES = 64 * 1024


class _BoundedDecoder:
    """Undo gzip/deflate while never producing more than ``limit`` bytes in total."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.parts: list[bytes] = []
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            self._zlib = None
        elif encoding in ("gzip", "x-gzip", "deflate"):
            self._zlib = zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
        else:
            raise FetchError(f"unsupported Content-Encoding {encoding!r}", error_type="network")

    def _add(self, piece: bytes) -> None:
        self.size += len(piece)
        if self.size > self.limit:
            raise TooLarge(f"body exceeds the {self.limit} byte limit (after decompression)")
        self.parts.append(piece)

    def feed(self, data: bytes) -> None:
        if self._zlib is None:
            self._add(data)
            return
        try:
            while data:
                self._add(self._zlib.decompress(data, self.limit - self.size + 1))
                data = self._zlib.unconsumed_tail
        except zlib.error as exc:
            raise FetchError(f"corrupt compressed body: {exc}", error_type="network") from exc

    def finish(self) -> bytes:
        if self._zlib is not None:
            self._add(self._zlib.flush())
        return b"".join(self.parts)


def _sent_hook(
    on_sent: Callable[[], Awaitable[None]],
) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
    """An httpcore ``trace`` callback that awaits ``on_sent`` once the first headers are out."""
    fired = False

    async def trace(event: str, _info: dict[str, Any]) -> None:
        nonlocal fired
        if not fired and event.endswith("send_request_headers.complete"):
            fired = True
            await on_sent()

    return trace


def tls_context(settings: Settings) -> ssl.SSLContext | bool:
    """Certificate checking for fetches: the defaults, plus ``FORAGER_CA_BUNDLE_FILE`` if set."""
    if settings.ca_bundle_file is None:
        return True
    context = ssl.create_default_context(cafile=certifi.where())
    context.load_verify_locations(cafile=str(settings.ca_bundle_file))
    return context


class HttpxFetcher(CredentialSafeFetcher):
    """The ``http`` fetcher: httpx with HTTP/2 where offered, one connection pool per proxy."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._clients: OrderedDict[str | None, httpx.AsyncClient] = OrderedDict()

    def _client(self, proxy_url: str | None) -> httpx.AsyncClient:
        client = self._clients.get(proxy_url)
        if client is None:
            s = self.settings
            tls = tls_context(s)
            proxy: httpx.Proxy | str | None = proxy_url
            if proxy_url and proxy_url.startswith("https://") and isinstance(tls, ssl.SSLContext):
                proxy = httpx.Proxy(proxy_url, ssl_context=tls)  # TLS to the proxy itself
            client = httpx.AsyncClient(
                http2=True,
                proxy=proxy,
                verify=tls,
                follow_redirects=True,
                max_redirects=s.max_redirects,
                timeout=httpx.Timeout(s.fetch_timeout_seconds, connect=s.connect_timeout_seconds),
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
                trust_env=False,
            )
            self._clients[proxy_url] = client
            while len(self._clients) > _MAX_CLIENTS:
                _, old = self._clients.popitem(last=False)
                asyncio.get_running_loop().create_task(old.aclose())
        self._clients.move_to_end(proxy_url)
        return client

    async def _fetch_classified(self, request: FetchRequest) -> FetchResponse:
        started = time.perf_counter()
        via_proxy = request.proxy_url is not None
        try:
            async with asyncio.timeout(self.settings.fetch_timeout_seconds):
                response = await self._fetch(request)
        except TimeoutError as exc:
            raise FetchTimeout(
                f"no complete response within {self.settings.fetch_timeout_seconds:g} s"
            ) from exc
        except httpx.TimeoutException as exc:
            raise FetchTimeout(f"timed out: {type(exc).__name__}") from exc
        except httpx.ProxyError as exc:
            raise ProxyError(f"proxy failed: {exc}") from exc
        except httpx.TooManyRedirects as exc:
            raise FetchError(
                f"more than {self.settings.max_redirects} redirects", error_type="http_4xx"
            ) from exc
        except ValueError as exc:  # httpx refuses a malformed proxy URL when building a client
            if via_proxy:
                raise ProxyError(f"unusable proxy URL: {exc}") from exc
            raise NetworkError(f"unusable URL: {exc}") from exc
        except (httpx.TransportError, httpx.InvalidURL, httpx.DecodingError) as exc:
            detail = str(exc) or type(exc).__name__
            if via_proxy and isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError):
                # The connection is to the proxy: a refusal or reset there is the proxy's fault.
                raise ProxyError(f"proxy connection failed: {detail}") from exc
            raise NetworkError(f"network error: {detail}") from exc
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        status, headers, final_url, body = response
        if via_proxy and status == 407:
            raise ProxyError("proxy refused the credentials (407)")
        if status >= 400:
            raise HTTPStatusError(
                f"HTTP {status} from {final_url}", status_code=status, headers=headers, body=body
            )
        return FetchResponse(final_url, status, headers, body, elapsed_ms)

    async def _fetch(self, request: FetchRequest) -> tuple[int, dict[str, str], str, bytes]:
        limit = self.settings.max_body_bytes
        headers = {
            "User-Agent": request.user_agent,
            "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
            "Accept-Encoding": "gzip, deflate",
            **request.headers,
        }
        client = self._client(request.proxy_url)
        extensions = {"trace": _sent_hook(request.on_sent)} if request.on_sent else None
        async with client.stream(
            "GET", request.url, headers=headers, extensions=extensions
        ) as response:
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > limit:
                raise TooLarge(f"Content-Length {declared} exceeds the {limit} byte limit")
            decoder = _BoundedDecoder(response.headers.get("content-encoding", ""), limit)
            if response.status_code < 400:
                async for chunk in response.aiter_raw():
                    decoder.feed(chunk)
            elif response.status_code in _BAN_STATUSES:
                # Only the start of an error page: enough to tell a block page (ban handling).
                async for chunk in response.aiter_raw():
                    decoder.feed(chunk)
                    if decoder.size >= _ERROR_BODY_BYTES:
                        break
            body = decoder.finish()
            return (
                response.status_code,
                {k.lower(): v for k, v in response.headers.items()},
                str(response.url),
                body,
            )

    async def aclose(self) -> None:
        clients = list(self._clients.values())
        self._clients.clear()
        for client in clients:
            await client.aclose()
