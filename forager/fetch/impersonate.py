"""The ``impersonate`` fetcher: curl_cffi speaking with a real browser's TLS and HTTP/2 fingerprint.

Sites that refuse clients by their TLS handshake (JA3/JA4) or HTTP/2 settings see Chrome
here. The contract is the ``http`` fetcher's: one overall deadline, bounded redirects,
a body limit enforced while the body arrives (curl's write callback refuses the chunk that
would cross it, so nothing past the limit is ever held), proxies with credentials that never
reach an error text, and ``on_sent`` awaited once the request headers are out.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from typing import Any

from curl_cffi import CurlECode, CurlHttpVersion, CurlOpt
from curl_cffi.curl import CURL_WRITEFUNC_ERROR, CURLINFO_HEADER_OUT, Curl
from curl_cffi.requests import AsyncSession, Response
from curl_cffi.requests import exceptions as curl_errors

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

# The browser whose fingerprint is presented (curl_cffi's newest Chrome).
IMPERSONATE = "chrome"
# Curl handles one session keeps; requests beyond this wait for a free one.
_MAX_HANDLES = 512

# The debug callback of the request being started in this task (see _Session.pop_curl).
_debug_hook: contextvars.ContextVar[Callable[[int, bytes], None] | None] = contextvars.ContextVar(
    "forager_curl_debug_hook", default=None
)


class _Session(AsyncSession[Response]):
    """An AsyncSession whose handles report, per request, when the request headers left.

    curl_cffi takes curl options per session only; the handle is popped inside the caller's
    task, so a context variable carries that request's hook onto its handle. The session
    resets every handle when it is returned to the pool, which removes the hook again.

    curl_cffi drops its reference to the callback's cffi handle *before* it detaches the
    curl handle, and curl still reports while detaching: the handle is kept alive here (one
    per curl handle, replaced on its next use) so that late report never reaches freed memory.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hook_handles: dict[int, object] = {}

    async def pop_curl(self) -> Curl:
        curl = await super().pop_curl()
        hook = _debug_hook.get()
        if hook is not None:
            curl.setopt(CurlOpt.VERBOSE, 1)
            curl.setopt(CurlOpt.DEBUGFUNCTION, hook)
            self._hook_handles[id(curl)] = curl._debug_handle
        return curl


class _Body:
    """Collects the (decompressed) body; refuses the chunk that would cross ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.parts: list[bytes] = []
        self.too_large = False

    def write(self, chunk: bytes) -> int:
        self.size += len(chunk)
        if self.size > self.limit:
            self.too_large = True
            return int(CURL_WRITEFUNC_ERROR)  # curl aborts the transfer (CURLE_WRITE_ERROR)
        self.parts.append(chunk)
        return len(chunk)


class CurlFetcher(CredentialSafeFetcher):
    """The ``impersonate`` fetcher: one curl_cffi session (connection pool) for all proxies."""

    def __init__(self, settings: Settings, impersonate: str = IMPERSONATE) -> None:
        self.settings = settings
        self.impersonate = impersonate
        self._session: _Session | None = None

    def _get_session(self) -> _Session:
        if self._session is None:
            s = self.settings
            self._session = _Session(
                impersonate=self.impersonate,
                timeout=(s.connect_timeout_seconds, s.fetch_timeout_seconds),
                allow_redirects=True,
                max_redirects=s.max_redirects,
                max_clients=_MAX_HANDLES,
                # HTTP/2 over TLS only, as browsers do: no cleartext "Upgrade: h2c" offer.
                http_version=CurlHttpVersion.V2TLS,
                trust_env=False,
                # A declared Content-Length over the limit is refused before any body byte.
                curl_options={CurlOpt.MAXFILESIZE_LARGE: s.max_body_bytes},
            )
        return self._session

    async def _fetch_classified(self, request: FetchRequest) -> FetchResponse:
        s = self.settings
        started = time.perf_counter()
        via_proxy = request.proxy_url is not None
        body = _Body(s.max_body_bytes)
        sent: list[asyncio.Future[None]] = []
        try:
            async with asyncio.timeout(s.fetch_timeout_seconds):
                try:
                    response = await self._request(request, body, sent)
                finally:
                    if sent:  # the politeness hook runs to its end whatever happened
                        await asyncio.shield(sent[0])
        except TimeoutError as exc:
            raise FetchTimeout(
                f"no complete response within {s.fetch_timeout_seconds:g} s"
            ) from exc
        except curl_errors.RequestException as exc:
            raise _classify(exc, body, via_proxy, s.max_body_bytes, s.max_redirects) from exc
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        status = response.status_code
        if via_proxy and status == 407:
            raise ProxyError("proxy refused the credentials (407)")
        if status >= 400:
            raise HTTPStatusError(f"HTTP {status} from {response.url}", status_code=status)
        headers: dict[str, str] = {}
        for name, value in response.headers.multi_items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else (value or "")
        return FetchResponse(response.url, status, headers, b"".join(body.parts), elapsed_ms)

    async def _request(
        self, request: FetchRequest, body: _Body, sent: list[asyncio.Future[None]]
    ) -> Response:
        headers = {"User-Agent": request.user_agent, **request.headers}
        # Without a hook to call, curl is left quiet (its debug reports cost time).
        token = _debug_hook.set(_sent_hook(request, sent) if request.on_sent else None)
        try:
            return await self._get_session().request(
                "GET",
                request.url,
                headers=headers,
                proxy=request.proxy_url,
                content_callback=body.write,
            )
        finally:
            _debug_hook.reset(token)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def _sent_hook(
    request: FetchRequest, sent: list[asyncio.Future[None]]
) -> Callable[[int, bytes], None]:
    """A curl debug callback that starts ``on_sent`` when the first request headers are out.

    curl calls it from the event loop's thread (the async session drives curl from loop
    callbacks); it must not raise into C, so it only schedules the hook.
    """
    on_sent = request.on_sent
    loop = asyncio.get_running_loop()

    def hook(kind: int, _data: bytes) -> None:
        if on_sent is not None and kind == CURLINFO_HEADER_OUT and not sent:
            sent.append(asyncio.ensure_future(on_sent(), loop=loop))

    return hook


def _classify(
    exc: curl_errors.RequestException,
    body: _Body,
    via_proxy: bool,
    limit: int,
    max_redirects: int,
) -> FetchError:
    code: Any = getattr(exc, "code", 0)
    detail = str(exc) or type(exc).__name__
    if body.too_large:
        return TooLarge(f"body exceeds the {limit} byte limit (after decompression)")
    if code == CurlECode.FILESIZE_EXCEEDED:
        return TooLarge(f"body exceeds the {limit} byte limit")
    if isinstance(exc, curl_errors.Timeout) or code == CurlECode.OPERATION_TIMEDOUT:
        return FetchTimeout(f"timed out: {detail}")
    if isinstance(exc, curl_errors.TooManyRedirects):
        return FetchError(f"more than {max_redirects} redirects", error_type="http_4xx")
    if isinstance(exc, curl_errors.ProxyError) or code in (
        CurlECode.COULDNT_RESOLVE_PROXY,
        CurlECode.PROXY,
    ):
        return ProxyError(f"proxy failed: {detail}")
    if isinstance(exc, curl_errors.InvalidSchema | curl_errors.InvalidURL):
        if via_proxy:
            return ProxyError(f"unusable proxy URL: {detail}")
        return NetworkError(f"unusable URL: {detail}")
    if via_proxy and isinstance(exc, curl_errors.ConnectionError):
        # The connection is to the proxy: a refusal or reset there is the proxy's fault.
        return ProxyError(f"proxy connection failed: {detail}")
    return NetworkError(f"network error: {detail}")
