"""The ``browser`` fetcher: Playwright driving the system Chromium, for pages built by JavaScript.

One Chromium per process (started on first use, at ``FORAGER_CHROMIUM_PATH``), shared by every
``BrowserFetcher`` of the process and closed with the last of them. A browser context (cookies,
cache, proxy) is kept per (proxy, user agent) and retired after ``MAX_PAGES_PER_CONTEXT`` pages
or ``MAX_CONTEXT_AGE_SECONDS``, so a long-running worker's memory does not grow. Images, fonts
and media are refused by default.

A page is loaded, then the fetcher waits for the domain's ``wait_for_selector`` (missing in
time: ``timeout``) or else for network idle (bounded; a page that never goes quiet is taken as
it is), and returns the rendered HTML. The contract is the other fetchers': one deadline for
the whole fetch, redirects capped, the document's bytes counted as they arrive (the load is
stopped once over ``max_body_bytes``) and the rendered HTML held to the same limit, proxies
whose credentials never reach an error, ``on_sent`` awaited once the request is on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psutil
from playwright.async_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    Route,
    async_playwright,
)
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Response as PlaywrightResponse
from playwright.async_api import TimeoutError as PlaywrightTimeout

from forager.config import Settings
from forager.errors import (
    EgressDenied,
    FetchError,
    FetchTimeout,
    HTTPStatusError,
    NetworkError,
    ProxyError,
    TooLarge,
)
from forager.fetch.base import CredentialSafeFetcher, FetchRequest, FetchResponse
from forager.fetch.egress import EgressPolicy, classify
from forager.fetch.gateway import DENIED_HEADER, FAILED_HEADER, Gateway, Grant
from forager.fetch.sandbox import Launch, launch_options

log = logging.getLogger(__name__)
_REAP_SECONDS = 5.0  # a closed private browser's processes, before they are killed
T = TypeVar("T")

BLOCKED_RESOURCE_TYPES = frozenset({"image", "font", "media"})
MAX_PAGES_PER_CONTEXT = 100
MAX_CONTEXT_AGE_SECONDS = 300.0
MAX_CONTEXTS = 16  # least recently used contexts beyond this are retired
NETWORK_IDLE_MAX_SECONDS = 10.0
# Playwright waits end this long before the fetch's own deadline, so its timeout (which names
# what was awaited) wins even when a loaded machine runs the event loop late.
_MARGIN_MS = 1000.0
# Every connection goes through the egress gateway, loopback too (Chromium bypasses proxies
# for it by default); WebRTC may not use UDP outside it, and no DNS is prefetched.
_LAUNCH_ARGS = [
    "--proxy-bypass-list=<-loopback>",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--dns-prefetch-disable",
    "--disable-dev-shm-usage",
    # At most two renderer processes per core: more cannot run at once, and each costs its own
    # memory. Pages of one site in one context share them beyond that (Chromium never puts two
    # contexts, or two sites, in one renderer): on 2 cores, 8 pages at once took 55–85 MB less
    # at the peak for no less speed (docs/BENCHMARKS.md, browser crawls beside Crawlee).
    f"--renderer-process-limit={max(2, 2 * len(os.sched_getaffinity(0)))}",
]
_PROXY_ERRORS = (
    "ERR_PROXY",
    "ERR_TUNNEL_CONNECTION_FAILED",
    "ERR_NO_SUPPORTED_PROXIES",
    "ERR_SOCKS_CONNECTION",
    "ERR_MANDATORY_PROXY",
)


_CONNECTION_ERRORS = ("ERR_CONNECTION", "ERR_SOCKET", "ERR_EMPTY_RESPONSE", "ERR_ADDRESS")
# What the page watch holds: every document's response, before Chromium acts on it.
_HELD_DOCUMENTS = {"urlPattern": "*", "resourceType": "Document", "requestStage": "Response"}


# -- the one browser of the process -------------------------------------------------------


class _SharedBrowser:
    """Chromium for one event loop, started on the first ``acquire`` and closed by the last
    ``release``."""

    def __init__(self, marker: str | None = None) -> None:
        # A private browser (a live monitor's) carries a marker switch on its command line,
        # so its process tree can be found and measured (``browser_processes``).
        self.marker = marker
        self.users = 0
        self.lock = asyncio.Lock()
        self.playwright: Playwright | None = None
        self.browser: Browser | None = None
        self.launch: Launch | None = None

    def acquire(self) -> None:
        self.users += 1

    async def browser_for(self, settings: Settings) -> Browser:
        async with self.lock:
            if self.browser is not None and self.browser.is_connected():
                return self.browser
            await self._close()
            path = settings.chromium_path
            if not await asyncio.to_thread(_executable, path):
                raise FetchError(
                    f"Chromium not found at {path} (set FORAGER_CHROMIUM_PATH)",
                    error_type="internal",
                )
            args = (
                [*_LAUNCH_ARGS, f"--forager-browser={self.marker}"] if self.marker else _LAUNCH_ARGS
            )
            self.launch = launch_options(settings, args)
            self.playwright = await async_playwright().start()
            try:
                self.browser = await self.playwright.chromium.launch(**self.launch.kwargs)
            except PlaywrightError as exc:
                await self._close()
                raise FetchError(
                    f"Chromium at {path} did not start: {_first_line(exc)}", error_type="internal"
                ) from exc
            log.info("browser fetcher: started Chromium %s", self.browser.version)
            return self.browser

    async def release(self) -> None:
        self.users -= 1
        if self.users <= 0:
            async with self.lock:
                await self._close()

    async def _close(self) -> None:
        browser, self.browser = self.browser, None
        playwright, self.playwright = self.playwright, None
        if browser is not None:
            with contextlib.suppress(Exception):
                await browser.close()
        if playwright is not None:
            with contextlib.suppress(Exception):
                await playwright.stop()
        launch, self.launch = self.launch, None
        if launch is not None:
            await asyncio.to_thread(launch.cleanup)
        if self.marker is not None:
            await asyncio.to_thread(_reap, self.marker)


def _reap(marker: str) -> None:
    """A private browser is gone when its close returns: its processes get ``_REAP_SECONDS``
    to exit (on a busy machine Chromium can outlive Playwright's close, or the close can fail),
    then whatever is left of them is killed."""
    _, alive = psutil.wait_procs(browser_processes(marker), timeout=_REAP_SECONDS)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=_REAP_SECONDS)


_shared: dict[asyncio.AbstractEventLoop, _SharedBrowser] = {}


def _shared_browser() -> _SharedBrowser:
    loop = asyncio.get_running_loop()
    for other in [k for k in _shared if k.is_closed()]:
        del _shared[other]
    if loop not in _shared:
        _shared[loop] = _SharedBrowser()
    return _shared[loop]


def browser_processes(marker: str) -> list[psutil.Process]:
    """The processes of the private browser started with ``marker``: Chromium and its
    renderers, GPU and utility processes."""
    switch = f"--forager-browser={marker}"
    roots = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if switch in cmdline and not any("--type=" in part for part in cmdline):
            roots.append(proc)
    found: dict[int, psutil.Process] = {}
    for root in roots:
        found[root.pid] = root
        with contextlib.suppress(psutil.Error):
            for child in root.children(recursive=True):
                found[child.pid] = child
    return list(found.values())


def running_browsers() -> int:
    """How many Chromium instances this process has open (for tests)."""
    return sum(1 for s in _shared.values() if s.browser is not None)


# -- contexts -----------------------------------------------------------------------------


# (proxy URL, user agent, private host allowed, profile headers, profile cookies and the host
# they were set for, sticky session): a context carries one request profile, one cookie jar.
_Key = tuple[
    str | None,
    str,
    str | None,
    tuple[tuple[str, str], ...],
    tuple[tuple[str, str], ...],
    str | None,
    str | None,
]


@dataclass(slots=True)
class _Context:
    context: BrowserContext
    grant_user: str  # its credentials at the egress gateway
    grant: Grant
    created: float = field(default_factory=time.monotonic)
    pages: int = 0  # fetches started in it so far
    open: int = 0  # fetches running in it now
    retired: bool = False
    idle: list[_Tab] = field(default_factory=list)  # pages kept for the next fetches


@dataclass(slots=True)
class _Tab:
    """A page and its watch, reused by the context's fetches (no new renderer each time)."""

    page: Page
    watch: _Watch


def _router(
    headers: dict[str, str], host: str | None, block: bool
) -> Callable[[Route], Awaitable[None]]:
    """A context's request handler: blocked resource types aborted; the request profile's
    headers added to requests to the fetched host only (an ``Authorization`` header must not
    reach a CDN or a tracker the page loads from elsewhere)."""

    async def handle(route: Route) -> None:
        request = route.request
        if block and request.resource_type in BLOCKED_RESOURCE_TYPES:
            await route.abort("blockedbyclient")
        elif headers and urlsplit(request.url).hostname == host:
            await route.continue_(headers={**request.headers, **headers})
        else:
            await route.continue_()

    return handle


# -- one page load ------------------------------------------------------------------------


class _Watch:
    """Follows a page's document requests through CDP: bytes, redirects, first send.

    One per page, kept with it while the page is reused; ``begin`` starts a new fetch.
    A document's response is held (CDP ``Fetch``, response stage, documents only) until the
    watch has seen it: the main frame's redirect past ``max_redirects`` is failed there, before
    Chromium follows it, so a redirect loop costs the site exactly ``max_redirects + 1``
    requests however busy the machine is (a ``Page.stopLoading`` lands a few hops late). The
    frames a page embeds redirect as they will: theirs are not the page's redirects.
    """

    def __init__(self, page: Page, limit: int, max_redirects: int) -> None:
        self.page = page
        self.limit = limit
        self.max_redirects = max_redirects
        self.cdp: Any = None
        self.main_frame = ""
        self._answers: set[asyncio.Task[Any]] = set()
        self.begin(None)

    def begin(self, request: FetchRequest | None) -> None:
        self.request = request
        self.documents: set[str] = set()
        self.last_document_url = request.url if request is not None else ""
        self.on_wire: set[str] = set()
        self.received = 0
        self.redirects = 0  # the main frame's redirect responses, counted as they are held
        self.too_large = False
        self.too_many_redirects = False
        self.exceeded = asyncio.Event()  # set when a limit is crossed; waits end at once
        self.sent: asyncio.Future[None] | None = None
        self._stopping: asyncio.Task[Any] | None = None

    async def start(self) -> None:
        self.cdp = await self.page.context.new_cdp_session(self.page)
        self.cdp.on("Network.requestWillBeSent", self._will_send)
        self.cdp.on("Network.requestWillBeSentExtraInfo", self._on_wire)
        self.cdp.on("Network.dataReceived", self._data)
        self.cdp.on("Fetch.requestPaused", self._paused)
        await self.cdp.send("Network.enable")
        await self.cdp.send("Fetch.enable", {"patterns": [_HELD_DOCUMENTS]})
        tree = await self.cdp.send("Page.getFrameTree")
        self.main_frame = str(tree["frameTree"]["frame"]["id"])  # the page's, for its life

    def _will_send(self, params: dict[str, Any]) -> None:
        if params.get("type") != "Document":
            return
        request_id = params["requestId"]
        self.documents.add(request_id)
        if params.get("frameId") == self.main_frame:
            self.last_document_url = str(params.get("request", {}).get("url", ""))
        self._maybe_sent(request_id)

    def _paused(self, params: dict[str, Any]) -> None:
        """A document's response, held: the main frame's redirect over the cap is failed, the
        rest go on."""
        request_id = params["requestId"]
        status = int(params.get("responseStatusCode") or 0)
        answer = ("Fetch.continueRequest", {"requestId": request_id})
        if (
            params.get("frameId") == self.main_frame
            and 300 <= status < 400
            and _has_location(params.get("responseHeaders") or ())
        ):
            self.redirects += 1
            if self.redirects > self.max_redirects:
                self.too_many_redirects = True
                self.exceeded.set()
                answer = (
                    "Fetch.failRequest",
                    {"requestId": request_id, "errorReason": "BlockedByClient"},
                )
        task = asyncio.ensure_future(self.cdp.send(*answer))  # held: the loop's ref is weak
        self._answers.add(task)
        task.add_done_callback(self._answered)

    def _answered(self, task: asyncio.Task[Any]) -> None:
        """A CDP answer sent; its failure (the page closed meanwhile) is no error of ours."""
        self._answers.discard(task)
        if not task.cancelled():
            task.exception()

    def _on_wire(self, params: dict[str, Any]) -> None:
        self.on_wire.add(params["requestId"])
        self._maybe_sent(params["requestId"])

    def _maybe_sent(self, request_id: str) -> None:
        """The first document request with its headers on the wire starts ``on_sent``."""
        on_sent = self.request.on_sent if self.request is not None else None
        if (
            on_sent is not None
            and self.sent is None
            and request_id in self.documents
            and request_id in self.on_wire
        ):
            self.sent = asyncio.ensure_future(on_sent())

    def _data(self, params: dict[str, Any]) -> None:
        if params.get("requestId") not in self.documents:
            return
        self.received += int(params.get("dataLength") or 0)
        if self.received > self.limit and not self.too_large:
            self.too_large = True
            self.stop()
            self.exceeded.set()

    def stop(self) -> None:
        """Stop the page's load (a limit crossed, or an error page not worth reading)."""
        if self._stopping is None and self.cdp is not None:
            self._stopping = asyncio.get_running_loop().create_task(
                self.cdp.send("Page.stopLoading")
            )

    async def guard(self, awaitable: Awaitable[T]) -> T:
        """``awaitable``'s result, unless a limit is crossed first (then that error)."""
        task = asyncio.ensure_future(awaitable)
        crossed = asyncio.ensure_future(self.exceeded.wait())
        try:
            await asyncio.wait({task, crossed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            crossed.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            elif not task.cancelled():
                task.exception()  # retrieved here: raised below, or superseded by our error
        self.check()
        return task.result()

    def check(self) -> None:
        """Raise what the watch saw go over a limit."""
        if self.too_large:
            raise TooLarge(f"body exceeds the {self.limit} byte limit")
        if self.too_many_redirects:
            raise FetchError(f"more than {self.max_redirects} redirects", error_type="http_4xx")

    async def settle(self) -> None:
        """Let this fetch's ``on_sent`` and stop request finish."""
        for task in (self.sent, self._stopping):
            if task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(task)

    async def close(self) -> None:
        await self.settle()
        if self.cdp is not None:
            with contextlib.suppress(Exception):
                await self.cdp.detach()


def _has_location(headers: Any) -> bool:
    return any(str(h.get("name", "")).lower() == "location" for h in headers)


# -- the fetcher --------------------------------------------------------------------------


class BrowserFetcher(CredentialSafeFetcher):
    """The ``browser`` fetcher (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        block_resource_types: bool = True,
        max_pages_per_context: int = MAX_PAGES_PER_CONTEXT,
        max_context_age_seconds: float = MAX_CONTEXT_AGE_SECONDS,
        private_marker: str | None = None,
    ) -> None:
        self.settings = settings
        # With a marker: a Chromium of its own (a live monitor's), closed by ``aclose``,
        # instead of the process's shared one.
        self.private_marker = private_marker
        self.block_resource_types = block_resource_types
        self.max_pages_per_context = max_pages_per_context
        self.max_context_age_seconds = max_context_age_seconds
        self._contexts: OrderedDict[_Key, _Context] = OrderedDict()
        self.gateway = Gateway(settings)
        self._context_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(settings.browser_max_pages)
        self._shared: _SharedBrowser | None = None
        self.contexts_created = 0
        self.contexts_closed = 0

    async def _fetch_classified(self, request: FetchRequest) -> FetchResponse:
        s = self.settings
        # Waiting for a free page slot, and for Chromium and the gateway to start (a sandboxed
        # start takes seconds on a busy machine), is not fetching: the deadline starts after.
        async with self._slots:
            try:
                await self._browser()
            except PlaywrightError as exc:
                raise _classify(exc, request.proxy_url is not None) from exc
            await self.gateway.start()
            deadline = time.monotonic() + s.fetch_timeout_seconds
            try:
                async with asyncio.timeout(s.fetch_timeout_seconds):
                    return await self._fetch(request, deadline)
            except TimeoutError as exc:
                raise FetchTimeout(
                    f"no complete page within {s.fetch_timeout_seconds:g} s"
                ) from exc

    async def _browser(self) -> Browser:
        if self._shared is None:
            self._shared = (
                _SharedBrowser(self.private_marker) if self.private_marker else _shared_browser()
            )
            self._shared.acquire()
        return await self._shared.browser_for(self.settings)

    async def _private_host(self, request: FetchRequest) -> str | None:
        """The host a context's grant lets be private: the submitted one, when it is."""
        if self.settings.private_targets != "submitted":
            return None
        host = urlsplit(request.url).hostname or ""
        try:
            addresses = await self.gateway.resolver.resolve(host)
        except FetchError:
            return None  # it does not resolve: no private address to allow
        return host if any(classify(a) == "private" for a in addresses) else None

    async def _context(self, request: FetchRequest) -> _Context:
        private = await self._private_host(request)
        cookies = tuple(sorted(request.cookies.items()))
        key = (
            request.proxy_url,
            request.user_agent,
            private,
            tuple(sorted(request.headers.items())),
            cookies,
            urlsplit(request.url).hostname if cookies or request.headers else None,
            request.jar,
        )
        async with self._context_lock:
            entry = self._contexts.get(key)
            if entry is not None and (
                entry.pages >= self.max_pages_per_context
                or time.monotonic() - entry.created > self.max_context_age_seconds
                or not entry.context.browser
                or not entry.context.browser.is_connected()
            ):
                await self._retire(key)
                entry = None
            if entry is None:
                if request.jar is not None:  # the session's older cookies: its last context
                    for old in [k for k in self._contexts if k[6] == request.jar]:
                        await self._retire(old)
                browser = await self._browser()
                await self.gateway.start()
                policy = EgressPolicy(self.settings.private_targets, private)
                user, password, grant = self.gateway.grant(policy, request.proxy_url)
                context = await browser.new_context(
                    proxy={"server": self.gateway.server, "username": user, "password": password},
                    user_agent=request.user_agent,
                    service_workers="block",
                )
                if request.cookies:  # bound to the fetched URL's host, as the site's own are
                    await context.add_cookies(
                        [{"name": k, "value": v, "url": request.url} for k, v in cookies]
                    )
                if request.headers or self.block_resource_types:
                    handler = _router(request.headers, key[5], self.block_resource_types)
                    await context.route("**/*", handler)
                entry = self._contexts[key] = _Context(context, user, grant)
                self.contexts_created += 1
                while len(self._contexts) > MAX_CONTEXTS:
                    await self._retire(next(iter(self._contexts)))
            self._contexts.move_to_end(key)
            entry.pages += 1
            entry.open += 1
            return entry

    async def _retire(self, key: _Key) -> None:
        entry = self._contexts.pop(key)
        entry.retired = True
        if entry.open == 0:
            await self._close_context(entry)

    async def _close_context(self, entry: _Context) -> None:
        self.contexts_closed += 1
        with contextlib.suppress(Exception):
            await entry.context.close()
        self.gateway.revoke(entry.grant_user)

    async def _fetch(self, request: FetchRequest, deadline: float) -> FetchResponse:
        try:
            entry = await self._context(request)
        except PlaywrightError as exc:  # the browser died or refused the context
            raise _classify(exc, request.proxy_url is not None) from exc
        tab = entry.idle.pop() if entry.idle else None
        reusable = False  # only a page whose last load ended normally serves the next fetch
        try:
            try:
                if tab is None:
                    page = await entry.context.new_page()
                    tab = _Tab(
                        page,
                        _Watch(page, self.settings.max_body_bytes, self.settings.max_redirects),
                    )
                    await tab.watch.start()
                tab.watch.begin(request)
                response = await self._render(tab, entry.grant, request, deadline)
                reusable = True
                return response
            except HTTPStatusError:
                reusable = True
                raise
            except PlaywrightError as exc:
                if tab is not None:
                    tab.watch.check()
                    _gateway_refusal(entry.grant, tab.watch.last_document_url)
                raise _classify(exc, request.proxy_url is not None) from exc
        finally:
            await asyncio.shield(self._done(entry, tab, reusable))

    async def _done(self, entry: _Context, tab: _Tab | None, reusable: bool) -> None:
        if tab is not None:
            if reusable and not entry.retired and not tab.page.is_closed():
                await tab.watch.settle()
                entry.idle.append(tab)
            else:
                await tab.watch.close()
                with contextlib.suppress(Exception):
                    await tab.page.close()
        entry.open -= 1
        if entry.retired and entry.open == 0:
            await self._close_context(entry)

    @staticmethod
    async def _post(
        page: Page, watch: _Watch, request: FetchRequest, timeout_ms: float
    ) -> PlaywrightResponse | None:
        """Navigate with a POST: the navigation's own request (the first one the page makes)
        is continued as a POST carrying the body, as a submitted form would be."""

        async def as_post(route: Route) -> None:
            # This handler takes the navigation from the context's: the profile's headers too.
            headers = {**route.request.headers, **request.headers}
            headers["content-type"] = request.body_type or "application/octet-stream"
            await route.continue_(method="POST", post_data=request.body or b"", headers=headers)

        await page.route("**/*", as_post, times=1)
        try:
            return await watch.guard(
                page.goto(request.url, wait_until="commit", timeout=timeout_ms)
            )
        finally:
            await page.unroute("**/*", as_post)

    async def _render(
        self, tab: _Tab, grant: Grant, request: FetchRequest, deadline: float
    ) -> FetchResponse:
        s = self.settings
        page, watch = tab.page, tab.watch
        started = time.perf_counter()

        def remaining_ms() -> float:
            # A little under the overall deadline, so Playwright's timeout (which says what
            # was being waited for) fires before the fetch's own.
            return max(1.0, (deadline - time.monotonic()) * 1000 - _MARGIN_MS)

        if request.method == "POST":
            response = await self._post(page, watch, request, remaining_ms())
        else:
            response = await watch.guard(
                page.goto(request.url, wait_until="commit", timeout=remaining_ms())
            )
        watch.check()
        if response is None:
            raise NetworkError("the browser got no response")
        status = response.status
        if status >= 400:
            watch.stop()  # the error page itself is not read
            if DENIED_HEADER in response.headers or FAILED_HEADER in response.headers:
                _gateway_refusal(grant, response.url)
            raise HTTPStatusError(f"HTTP {status} from {response.url}", status_code=status)
        headers = {k.lower(): v for k, v in (await response.all_headers()).items()}
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > s.max_body_bytes:
            raise TooLarge(f"Content-Length {declared} exceeds the {s.max_body_bytes} byte limit")
        selector = request.wait_for_selector
        if selector:
            wait_ms = remaining_ms()  # the selector's own limit (seed SELECTOR_TIMEOUT_SECONDS)
            if s.browser_selector_timeout_seconds:
                wait_ms = min(wait_ms, s.browser_selector_timeout_seconds * 1000)
            try:
                await watch.guard(
                    page.wait_for_selector(selector, state="attached", timeout=wait_ms)
                )
            except PlaywrightTimeout as exc:
                watch.check()
                limit = s.browser_selector_timeout_seconds or s.fetch_timeout_seconds
                raise FetchTimeout(
                    f"selector {selector!r} did not appear within {limit:g} s"
                ) from exc
            except PlaywrightError as exc:
                watch.check()
                if "selector" in str(exc).lower():
                    raise FetchError(
                        f"wait_for_selector {selector!r} is not a valid selector",
                        error_type="internal",
                    ) from exc
                raise
        else:
            await watch.guard(page.wait_for_load_state("load", timeout=remaining_ms()))
            idle_ms = min(remaining_ms(), NETWORK_IDLE_MAX_SECONDS * 1000)
            with contextlib.suppress(PlaywrightTimeout):
                await watch.guard(page.wait_for_load_state("networkidle", timeout=idle_ms))
        watch.check()
        html = (await page.content()).encode("utf-8")
        watch.check()
        if len(html) > s.max_body_bytes:
            raise TooLarge(f"rendered page exceeds the {s.max_body_bytes} byte limit")
        # The body is the DOM serialized as UTF-8, whatever the wire charset was.
        headers["content-type"] = "text/html; charset=utf-8"
        headers.pop("content-encoding", None)
        headers.pop("content-length", None)
        jar: dict[str, str] = {}
        if request.jar is not None:  # a sticky session keeps what the page's context holds
            jar = {c["name"]: c["value"] for c in await page.context.cookies([response.url])}
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        return FetchResponse(response.url, status, headers, html, elapsed_ms, jar)

    async def aclose(self) -> None:
        entries = list(self._contexts.values())
        self._contexts.clear()
        for entry in entries:
            entry.retired = True
            await self._close_context(entry)
        shared, self._shared = self._shared, None
        if shared is not None:
            await shared.release()
        await self.gateway.aclose()


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _gateway_refusal(grant: Grant, url: str) -> None:
    """Raise what the egress gateway said about the document's host, if it did not reach it."""
    refused = grant.refusals.get((urlsplit(url).hostname or "").lower())
    if refused is None:
        return
    kind, why = refused
    if kind == "egress_denied":
        raise EgressDenied(why)
    if kind == "proxy":
        raise ProxyError(f"proxy failed: {why}")
    raise NetworkError(f"network error: {why}")


def _classify(exc: PlaywrightError, via_proxy: bool) -> FetchError:
    detail = _first_line(exc)
    if isinstance(exc, PlaywrightTimeout) or "ERR_TIMED_OUT" in detail:
        return FetchTimeout(f"timed out: {detail}")
    if "ERR_TOO_MANY_REDIRECTS" in detail:
        return FetchError(f"too many redirects: {detail}", error_type="http_4xx")
    if via_proxy and any(code in detail for code in _PROXY_ERRORS):
        return ProxyError(f"proxy failed: {detail}")
    if via_proxy and any(code in detail for code in _CONNECTION_ERRORS):
        # The connection is to the proxy: a refusal or reset there is the proxy's fault.
        return ProxyError(f"proxy connection failed: {detail}")
    return NetworkError(f"network error: {detail}")
