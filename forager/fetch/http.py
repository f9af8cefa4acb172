"""The ``http`` fetcher, and the redirect-following both libcurl fetchers share.

Plain fetching is libcurl through curl_cffi without impersonation: at 15 KB pages it costs a
fraction of httpx's CPU per page (docs/BENCHMARKS.md, "Fetchers"). ``CurlFetcher`` follows
redirects itself, hop by hop, so that before each request the target is checked by the egress
policy (``forager.fetch.egress``) and the connection is pinned to the checked address; through
a proxy the host is checked as a literal and by a local resolution before it is handed over.
One overall deadline covers every hop, ``on_sent`` is started once the first request's headers
are out, and bodies are decoded by bounded decoders (``forager.fetch.transfer``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from forager.config import Settings
from forager.errors import FetchError, FetchTimeout, HTTPStatusError, NetworkError, ProxyError
from forager.fetch.base import CredentialSafeFetcher, FetchRequest, FetchResponse
from forager.fetch.decode import ACCEPT_ENCODING
from forager.fetch.egress import EgressPolicy, Resolver, literal
from forager.fetch.transfer import Answer, Hop, Transfers

_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
_BODY_TYPE = "application/octet-stream"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _target(url: str) -> tuple[str, int]:
    """(host, port) of an http(s) URL; ``NetworkError`` for anything else."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise NetworkError(f"unusable URL {url!r}: {exc}") from exc
    if parts.scheme not in _DEFAULT_PORTS or not host:
        raise NetworkError(f"unusable URL {url!r}: only http(s) URLs with a host are fetched")
    return host, port or _DEFAULT_PORTS[parts.scheme]


# A Set-Cookie header's cookies, joined with ", " when there were several: split before each
# "name=" (an Expires date's comma is followed by a day number, never by "name=").
_NEXT_COOKIE = re.compile(r",\s*(?=[^;,=\s]+=)")


def set_cookies(headers: dict[str, str]) -> dict[str, str]:
    """The cookies an answer's ``Set-Cookie`` headers set (name → value; attributes dropped)."""
    found: dict[str, str] = {}
    for cookie in _NEXT_COOKIE.split(headers.get("set-cookie", "")):
        name, sep, value = cookie.split(";", 1)[0].strip().partition("=")
        if sep and name and " " not in name:
            found[name] = value.strip()
    return found


class CurlFetcher(CredentialSafeFetcher):
    """libcurl fetching with redirects, egress checks and bounded bodies (see the docstring)."""

    def __init__(self, settings: Settings, impersonate: str | None = None) -> None:
        self.settings = settings
        self.impersonate = impersonate
        self.transfers = Transfers(settings, impersonate)
        self.resolver = Resolver()

    def _headers(self, request: FetchRequest, jar: dict[str, str], body: bool) -> list[str]:
        merged = {"user-agent": ("User-Agent", request.user_agent)}
        if not self.impersonate:  # the impersonated browser brings its own, in its order
            merged["accept"] = ("Accept", _ACCEPT)
        merged |= {k.lower(): (k, v) for k, v in request.headers.items()}
        merged.pop("content-type", None)  # a body's type goes with the body (gone after a 303)
        if body:
            merged["content-type"] = ("Content-Type", request.body_type or _BODY_TYPE)
        # Only the codings decode.py undoes, whatever the caller asked for; the impersonation
        # offers the same ones itself (and libcurl is told not to decode them).
        merged.pop("accept-encoding", None)
        if not self.impersonate:
            merged["accept-encoding"] = ("Accept-Encoding", ACCEPT_ENCODING)
        # The profile's cookies, then those a redirect of this fetch set (which win).
        cookies = request.cookies | jar
        if cookies and "cookie" not in merged:
            merged["cookie"] = ("Cookie", "; ".join(f"{k}={v}" for k, v in cookies.items()))
        return [f"{name}: {value}" for name, value in merged.values()]

    async def _fetch_classified(self, request: FetchRequest) -> FetchResponse:
        s = self.settings
        started = time.perf_counter()
        sent: list[asyncio.Future[None]] = []
        jar: dict[str, str] = {}  # the cookies this fetch's answers set, hop after hop
        try:
            async with asyncio.timeout(s.fetch_timeout_seconds):
                try:
                    answer = await self._follow(request, sent, time.monotonic(), jar)
                finally:
                    if sent:  # the politeness hook runs to its end whatever happened
                        await asyncio.shield(sent[0])
        except TimeoutError as exc:
            raise FetchTimeout(
                f"no complete response within {s.fetch_timeout_seconds:g} s"
            ) from exc
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        status = answer.status
        if request.proxy_url and status == 407:
            raise ProxyError("proxy refused the credentials (407)")
        if status >= 400:
            raise HTTPStatusError(
                f"HTTP {status} from {answer.url}",
                status_code=status,
                headers=answer.headers,
                body=answer.body,
            )
        jar |= set_cookies(answer.headers)
        return FetchResponse(answer.url, status, answer.headers, answer.body, elapsed_ms, jar)

    async def _follow(
        self,
        request: FetchRequest,
        sent: list[asyncio.Future[None]],
        began: float,
        jar: dict[str, str],
    ) -> Answer:
        s = self.settings
        policy = EgressPolicy(s.private_targets, _target(request.submitted_url or request.url)[0])
        url = request.url
        body = (request.body or b"") if request.method == "POST" else None
        limit = s.max_body_bytes
        if request.max_bytes is not None:
            limit = min(limit, request.max_bytes)
        if request.truncate_at is not None:
            limit = min(limit, request.truncate_at)
        for hop_number in range(s.max_redirects + 1):
            host, port = _target(url)
            hop = Hop(
                url,
                self._headers(request, jar, body is not None),
                limit,
                max(0.001, s.fetch_timeout_seconds - (time.monotonic() - began)),
                request.proxy_url,
                truncate=request.truncate_at is not None,
                body=body,
            )
            if request.proxy_url:
                await self.resolver.check_proxy(request.proxy_url)
                await self.resolver.check_all(policy, host)
            else:
                address = await self.resolver.connect_address(policy, host)
                if literal(host) is None:
                    pinned = f"[{address}]" if address.version == 6 else str(address)
                    hop.connect_to = f"{host}:{port}:{pinned}:{port}"
            if hop_number == 0 and request.on_sent is not None:
                hop.on_headers_out = _sent_hook(request, sent)
            answer = await self.transfers.run(hop)
            location = answer.headers.get("location")
            if answer.status not in _REDIRECTS or not location:
                return answer
            jar |= set_cookies(answer.headers)  # sent on the next hops of this fetch
            url = urljoin(url, location.strip())
            if answer.status in (301, 302, 303):
                body = None  # followed with a GET, as browsers do
        raise FetchError(f"more than {s.max_redirects} redirects", error_type="http_4xx")

    async def aclose(self) -> None:
        await self.transfers.aclose()


class HttpFetcher(CurlFetcher):
    """The ``http`` fetcher: plain libcurl, HTTP/2 where the server offers it over TLS."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, None)


def _sent_hook(request: FetchRequest, sent: list[asyncio.Future[None]]) -> Callable[[], None]:
    """Starts ``on_sent`` when the first request headers are out.

    curl calls it from the event loop's thread (the multi handle is driven from loop
    callbacks); it must not raise into C, so it only schedules the hook.
    """
    on_sent = request.on_sent
    loop = asyncio.get_running_loop()

    def hook() -> None:
        if on_sent is not None and not sent:
            sent.append(asyncio.ensure_future(on_sent(), loop=loop))

    return hook
