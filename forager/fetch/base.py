"""The fetcher port: ``fetch(request) -> response``, one method, like an httpx transport."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from forager.errors import FetchError

# Bounded within a tag: "<meta<meta<meta…" cannot make the search quadratic (DESIGN.md 10).
_META_CHARSET = re.compile(rb"""<meta[^>]{1,512}?charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+)""", re.I)
_HEADER_CHARSET = re.compile(r"charset\s*=\s*\"?([A-Za-z0-9_\-:.]+)", re.I)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    url: str
    user_agent: str
    proxy_url: str | None = None  # scheme://[user:pass@]host:port, credentials in memory only
    # The request profile's headers and cookies (forager.domains.profile): they may hold
    # secrets, so they are kept out of the repr (which a log line could show).
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    cookies: dict[str, str] = field(default_factory=dict, repr=False)
    # GET, or POST with ``body`` of type ``body_type``; a 301/302/303 redirect turns it into a
    # GET without body, as browsers do; 307/308 keep both.
    method: str = "GET"
    body: bytes | None = field(default=None, repr=False)
    body_type: str | None = None
    # Awaited once, as soon as the request has left (politeness is measured from then).
    on_sent: Callable[[], Awaitable[None]] | None = None
    # Which fetcher the domain uses (http | impersonate | browser; see forager.fetch.fetcher_set)
    # and, for the browser, the selector to wait for before taking the page (else network idle).
    fetcher: str = "http"
    wait_for_selector: str | None = None
    # Keep only the first this many decoded bytes and end the transfer there, instead of
    # failing ``too_large`` (robots.txt: RFC 9309 lets a crawler cut it at 500 KiB).
    truncate_at: int | None = None
    # Refuse (``too_large``) a body past this many decoded bytes, when below
    # FORAGER_MAX_BODY_BYTES (product images: FORAGER_IMAGE_MAX_BYTES).
    max_bytes: int | None = None
    # The URL the operator submitted when it is not ``url`` (an image found on a submitted
    # page): FORAGER_PRIVATE_TARGETS=submitted allows a private address for its host only.
    submitted_url: str | None = None
    # The sticky session whose cookie jar ``cookies`` is (forager.domains.sticky_sessions), as an
    # opaque name: the browser gives each jar a context of its own.
    jar: str | None = None


@dataclass(frozen=True, slots=True)
class FetchResponse:
    url: str  # after redirects
    status_code: int
    headers: dict[str, str]
    body: bytes  # content-decoded (gzip/deflate undone), not charset-decoded
    elapsed_ms: int
    # The cookies the site set during this fetch, every redirect hop included (name → value; a
    # browser's: all its context holds for the final URL). A sticky session keeps them.
    cookies: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def text(self) -> str:
        """The body as text: charset from the header, else from a <meta> tag, else UTF-8."""
        return self.body.decode(self.charset, errors="replace")

    @property
    def charset(self) -> str:
        candidates = []
        header = _HEADER_CHARSET.search(self.headers.get("content-type", ""))
        if header:
            candidates.append(header.group(1))
        meta = _META_CHARSET.search(self.body[:4096])
        if meta:
            candidates.append(meta.group(1).decode("ascii", "ignore"))
        for name in candidates:
            try:
                "".encode(name)
            except LookupError:
                continue
            return name
        return "utf-8"


class Fetcher(Protocol):
    async def fetch(self, request: FetchRequest) -> FetchResponse:
        """Fetch one page or raise a ``FetchError`` subclass that says what went wrong."""
        ...

    async def aclose(self) -> None: ...


def scrub_credentials(text: str, proxy_url: str) -> str:
    """``text`` without the proxy URL's credentials (whole URL, userinfo, or password)."""
    import httpx  # here only: it took 70 ms of the start of each parse process (they import us)

    parts = httpx.URL(proxy_url)
    secrets = [proxy_url, parts.userinfo.decode(errors="ignore"), parts.password or ""]
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class CredentialSafeFetcher(ABC):
    """A fetcher whose errors never carry the proxy's credentials: error texts are stored and
    logged. Subclasses implement ``_fetch_classified`` (raising ``FetchError`` subclasses)."""

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        try:
            return await self._fetch_classified(request)
        except FetchError as exc:
            if request.proxy_url:
                exc.message = scrub_credentials(exc.message, request.proxy_url)
                exc.args = (exc.message,)
            raise

    @abstractmethod
    async def _fetch_classified(self, request: FetchRequest) -> FetchResponse: ...
