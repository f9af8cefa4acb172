"""The local test web site that Forager's tests and benchmarks crawl.

In-process::

    with TestSite(hosts=["127.0.0.1", "127.0.0.2"]) as site:
        httpx.get(site.url("/product/5", host="127.0.0.2"))
        site.log()  # {"requests": [...], "max_concurrency": {...}, "held": {...}}

``/hold/{key}`` answers only once the test calls ``site.release(key)`` (or the site resets or
stops): a request that is certainly still in flight, for as long as the test needs it.

As a separate process (writes the port to PATH once listening, stops on SIGTERM)::

    python -m tests.support.site --port 0 --hosts 127.0.0.1,127.0.0.2 --port-file PATH
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import os
import signal
import socket
import sys
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.support import adlibrary, pages, pictures, shop, sticky

DEFAULT_ROBOTS = "User-agent: *\nDisallow: /private/\n"
MIB = 1024 * 1024


# --------------------------------------------------------------------------- state


@dataclass(slots=True)
class RequestRecord:
    """One logged request. Times are ``time.time()`` wall-clock seconds."""

    method: str
    host: str
    path: str
    start: float
    end: float
    status: int
    client: str = ""  # the address the request came from (which host sent it)


class SiteState:
    """Mutable server state: request log, concurrency counters, prices, robots, flaky counters,
    held requests.

    Mutated on the server's event loop and read/reset from test threads, hence the lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: dict[str, int] = {}  # requests in flight per host; survives reset
        self._generation = 0
        self.requests: list[RequestRecord] = []
        self.max_concurrency: dict[str, int] = {}
        self.prices: dict[int, tuple[Decimal, bool]] = {}
        self.robots = DEFAULT_ROBOTS
        self.robots_status = 200
        self.flaky: dict[str, int] = {}
        self.ads = adlibrary.AdSettings()
        self._held: dict[str, int] = {}  # requests waiting in /hold/{key}; survives reset
        self.live: dict[str, tuple[Any, int]] = {}  # /live/{key}: (value, status code)
        self.echoed: list[tuple[str, dict[str, str]]] = []  # /echo-headers: (host, headers)
        # A shopper gate: the paths (prefixes) it guards and the cookies and headers (lower-case
        # names) a request to them must carry, else 403 (``TestSite.set_gate``).
        self.gate: tuple[tuple[str, ...], dict[str, str], dict[str, str]] | None = None
        self._released: set[str] = set()
        self._turns: dict[str, int] = {}  # /turn/{key}: requests let through, not yet taken

    def reset(self) -> None:
        """Clear the log and settings; held requests of the previous test are let go."""
        with self._lock:
            self.ads = adlibrary.AdSettings()
            self._generation += 1
            self._released = set()
            self._turns = {}
            self.requests = []
            self.max_concurrency = {}
            self.prices = {}
            self.robots = DEFAULT_ROBOTS
            self.robots_status = 200
            self.flaky = {}
            self.live = {}
            self.echoed = []
            self.gate = None

    def begin(self, host: str) -> int:
        """Count a request in; returns the log generation to pass to :meth:`end`."""
        with self._lock:
            current = self._current.get(host, 0) + 1
            self._current[host] = current
            if current > self.max_concurrency.get(host, 0):
                self.max_concurrency[host] = current
            return self._generation

    def end(self, generation: int, record: RequestRecord) -> None:
        with self._lock:
            self._current[record.host] -= 1
            if generation == self._generation:  # not logged if a reset happened meanwhile
                self.requests.append(record)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": [asdict(r) for r in self.requests],
                "max_concurrency": dict(self.max_concurrency),
                "held": {k: n for k, n in self._held.items() if n},
            }

    def price(self, n: int) -> tuple[Decimal, bool]:
        return self.prices.get(n, (Decimal(n % 500) + Decimal("0.99"), True))

    def set_price(self, n: int, price: Decimal, available: bool = True) -> None:
        with self._lock:
            self.prices[n] = (price, available)

    def hold(self, key: str) -> int:
        """Count a request in as held for ``key``; returns the generation it was held in."""
        with self._lock:
            self._held[key] = self._held.get(key, 0) + 1
            return self._generation

    def unhold(self, key: str) -> None:
        with self._lock:
            self._held[key] -= 1

    def is_released(self, key: str, generation: int) -> bool:
        with self._lock:
            return key in self._released or generation != self._generation

    def release(self, key: str) -> None:
        """Let every request held for ``key`` answer, now and until the next reset."""
        with self._lock:
            self._released.add(key)

    def let_one(self, key: str) -> None:
        """Let one request waiting (or the next to come) in ``/turn/{key}`` answer."""
        with self._lock:
            self._turns[key] = self._turns.get(key, 0) + 1

    def take_turn(self, key: str, generation: int) -> bool:
        """Whether a request held in ``/turn/{key}`` may answer now (it uses up one turn)."""
        with self._lock:
            if generation != self._generation:
                return True
            if self._turns.get(key, 0) > 0:
                self._turns[key] -= 1
                return True
            return False

    def held(self, key: str) -> int:
        """How many requests for ``key`` are waiting to be released."""
        with self._lock:
            return self._held.get(key, 0)

    def set_live(self, key: str, value: Any, status: int = 200) -> None:
        with self._lock:
            self.live[key] = (value, status)

    def hit_flaky(self, key: str) -> int:
        """Count one request for ``key``; returns how many there have been, this one included."""
        with self._lock:
            self.flaky[key] = count = self.flaky.get(key, 0) + 1
            return count


# --------------------------------------------------------------------------- logging


def _host_without_port(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"host":
            host: str = value.decode("latin-1")
            if host.startswith("["):  # [::1]:8080
                return host[1 : host.find("]")]
            return host.rsplit(":", 1)[0]
    return ""


class RequestLogMiddleware:
    """Pure ASGI middleware logging every request except the ``/__`` control endpoints.

    A request is logged, and stops counting as in flight, just *before* the last byte of
    its response is written: a client that has its response always finds it in the log.
    """

    def __init__(self, app: ASGIApp, state: SiteState) -> None:
        self.app = app
        self.state = state

    def _gated(self, scope: Scope) -> bool:
        """Refused by the shopper gate: a guarded path without a cookie or header it names."""
        gate = self.state.gate
        if gate is None or not scope["path"].startswith(gate[0]):
            return False
        request = Request(scope)
        return any(request.cookies.get(k) != v for k, v in gate[1].items()) or any(
            request.headers.get(k) != v for k, v in gate[2].items()
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/__"):
            await self.app(scope, receive, send)
            return
        start = time.time()
        host = _host_without_port(scope)
        query = scope.get("query_string", b"").decode("latin-1")
        path = scope["path"] + (f"?{query}" if query else "")
        status = 0
        generation = self.state.begin(host)
        logged = False

        def log() -> None:
            nonlocal logged
            if not logged:
                logged = True
                client = (scope.get("client") or ("",))[0]
                record = RequestRecord(
                    scope["method"], host, path, start, time.time(), status, client
                )
                self.state.end(generation, record)

        async def send_and_log(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                log()
            await send(message)

        app = _status_response(403) if self._gated(scope) else self.app
        try:
            await app(scope, receive, send_and_log)
        finally:
            log()  # no complete response: failed, or the client went away


# --------------------------------------------------------------------------- handlers


class BadParam(Exception):
    """A query parameter that does not parse."""


def _query_num(request: Request, name: str, default: float) -> float:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise BadParam(f"bad {name}: {raw!r}") from None


def _kb(request: Request) -> int:
    return int(_query_num(request, "kb", pages.DEFAULT_KB))


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _state(request: Request) -> SiteState:
    state: SiteState = request.app.state.site
    return state


def _closing(request: Request) -> asyncio.Event:
    """Set when the server shuts down: long handlers end early instead of being cancelled."""
    closing: asyncio.Event = request.app.state.closing
    return closing


def _product_response(request: Request, n: int) -> HTMLResponse:
    price, available = _state(request).price(n)
    html = pages.product_page(n, price, available, _base_url(request), _kb(request))
    return HTMLResponse(html)


def _status_response(code: int) -> Response:
    headers = {"Retry-After": "1"} if code in (429, 503) else None
    body = "" if code in (204, 304) else pages.status_page(code)
    return HTMLResponse(body, status_code=code, headers=headers)


async def product(request: Request) -> Response:
    ms = _query_num(request, "ms", 0)  # a slow product page: fetches are caught in flight
    if ms > 0:
        await asyncio.sleep(min(ms, 60_000) / 1000)
    return _product_response(request, request.path_params["n"])


async def locale_shop(request: Request) -> Response:
    """A shop that prices for the shopper's locale: euros (the price less 10 %) only for a
    ``locale=de-DE`` cookie sent with German first in ``Accept-Language``, else dollars."""
    n: int = request.path_params["n"]
    price, available = _state(request).price(n)
    german = request.cookies.get("locale") == "de-DE" and request.headers.get(
        "accept-language", ""
    ).lower().startswith("de")
    if german:
        price, currency = (price * Decimal("0.9")).quantize(Decimal("0.01")), "EUR"
    else:
        currency = "USD"
    html = pages.product_page(n, price, available, _base_url(request), 0, currency=currency)
    return HTMLResponse(html)


async def with_script(request: Request) -> Response:
    """A page that loads a script from ``src`` (another host: what a browser sends there)."""
    src = request.query_params.get("src", "")
    return HTMLResponse(f'<html><body><script src="{src}"></script><p>page</p></body></html>')


async def lookup(request: Request) -> Response:
    """A shop's product lookup answering POST only: the product numbered by the JSON body's or
    the form's ``n``; 400 for anything else."""
    if request.headers.get("content-type", "").startswith("application/json"):
        n = (await request.json()).get("n")
    else:  # a form, read without python-multipart (not installed)
        n = parse_qs((await request.body()).decode()).get("n", [""])[0]
    if not str(n or "").isdigit():
        return PlainTextResponse("no n", status_code=400)
    return _product_response(request, int(str(n)))


async def product_api(request: Request) -> Response:
    """A shop's JSON API answering POST only: the product numbered by the JSON body's ``n``
    (price, stock) and two related ones, as JSON; 400 for anything else."""
    try:
        n = (await request.json()).get("n")
    except ValueError:
        n = None
    if not isinstance(n, int) or n < 0:
        return JSONResponse({"error": "no n"}, status_code=400)
    state = _state(request)

    def entry(m: int) -> dict[str, Any]:
        price, available = state.price(m)
        amount = {"amount": float(price), "currency": "USD"}
        return {
            "sku": f"SKU-{m}",
            "title": f"Test Product {m}",
            "price": amount,
            "stock": available,
        }

    return JSONResponse({"data": {"product": entry(n), "related": [entry(n + 1), entry(n + 2)]}})


async def js_price(request: Request) -> Response:
    n: int = request.path_params["n"]
    price, _ = _state(request).price(n)
    return HTMLResponse(pages.js_price_page(n, price))


async def js_product(request: Request) -> Response:
    n: int = request.path_params["n"]
    price, _ = _state(request).price(n)
    ms = int(_query_num(request, "ms", 0))
    return HTMLResponse(pages.js_product_page(n, price, max(0, min(ms, 60_000))))


async def amazon(request: Request) -> Response:
    html = pages.amazon_page(request.path_params["asin"], "en-US", _kb(request))
    return HTMLResponse(html)


async def amazon_br(request: Request) -> Response:
    html = pages.amazon_page(request.path_params["asin"], "pt-BR", _kb(request))
    return HTMLResponse(html)


async def captcha(request: Request) -> Response:
    return HTMLResponse(pages.CAPTCHA_PAGE)


async def notproduct(request: Request) -> Response:
    return HTMLResponse(pages.article_page(_kb(request)))


async def robots(request: Request) -> Response:
    state = _state(request)
    if state.robots_status != 200:
        return _status_response(state.robots_status)
    return PlainTextResponse(state.robots)


async def slow(request: Request) -> Response:
    ms: int = request.path_params["ms"]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_closing(request).wait(), min(ms, 120_000) / 1000)
    return _product_response(request, ms)


async def hold(request: Request) -> Response:
    """Wait until the test releases ``key`` (or the site resets or stops), then a product page
    (product ``?n=``, by default the key's length)."""
    key: str = request.path_params["key"]
    state, closing = _state(request), _closing(request)
    generation = state.hold(key)
    try:
        while not (state.is_released(key, generation) or closing.is_set()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), 0.01)
    finally:
        state.unhold(key)
    return _product_response(request, int(_query_num(request, "n", len(key))))


async def turn(request: Request) -> Response:
    """Like ``/hold/{key}``, but each request waits for a turn of its own (``let_one``): of
    two requests for one URL, the test decides which answers and which still waits (a
    ``release`` lets every one go, as for ``/hold``)."""
    key: str = request.path_params["key"]
    state, closing = _state(request), _closing(request)
    generation = state.hold(key)
    try:
        while not (
            state.take_turn(key, generation)
            or state.is_released(key, generation)
            or closing.is_set()
        ):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), 0.01)
    finally:
        state.unhold(key)
    return _product_response(request, int(_query_num(request, "n", len(key))))


async def status(request: Request) -> Response:
    code: int = request.path_params["code"]
    if not 200 <= code <= 599:
        return PlainTextResponse("status must be 200..599", status_code=400)
    return _status_response(code)


async def flaky(request: Request) -> Response:
    key: str = request.path_params["key"]
    fail = int(_query_num(request, "fail", 1))
    code = int(_query_num(request, "code", 500))
    if _state(request).hit_flaky(key) <= fail:
        return _status_response(code)
    return _product_response(request, len(key))


async def live(request: Request) -> Response:
    """A watched value (monitors): ``{"key", "value"}`` as set by ``set_live`` (JSON, or HTML
    with ``?format=html``); the status set with it (e.g. 500 while "down")."""
    key: str = request.path_params["key"]
    value, code = _state(request).live.get(key, (None, 200))
    if code != 200:
        return _status_response(code)
    if request.query_params.get("format") == "html":
        return HTMLResponse(
            f'<html><body><h1>{key}</h1><span id="value" data-v="{value}">{value}</span>'
            "</body></html>"
        )
    return JSONResponse({"key": key, "value": value, "nested": {"value": value}})


async def redirect(request: Request) -> Response:
    n: int = request.path_params["n"]
    target = f"/redirect/{n - 1}" if n > 0 else "/product/1"
    return RedirectResponse(target, status_code=302)


async def framed(request: Request) -> Response:
    """A product page embedding ``n`` frames of ``src`` (an ad slot's redirect chain, say)."""
    src = request.query_params.get("src", "/product/2")
    frames = "".join(
        f'<iframe src="{src}"></iframe>' for _ in range(int(request.query_params.get("n", "1")))
    )
    return HTMLResponse(f"<html><body><h1 id=framed>framed</h1>{frames}</body></html>")


async def redirect_loop(request: Request) -> Response:
    return RedirectResponse("/redirect-loop", status_code=302)


async def _stream(size: int, closing: asyncio.Event) -> AsyncIterator[bytes]:
    chunk = pages.big_chunk()
    sent = 0
    while sent < size and not closing.is_set():
        piece = chunk[: size - sent]
        sent += len(piece)
        yield piece
        await asyncio.sleep(0)  # let the loop notice a client that went away


def _big_size(request: Request) -> int:
    return max(0, int(_query_num(request, "mb", 10) * MIB))


async def big(request: Request) -> Response:
    body = _stream(_big_size(request), _closing(request))
    return StreamingResponse(body, media_type="text/html")


async def big_declared(request: Request) -> Response:
    size = _big_size(request)
    headers = {"Content-Length": str(size)}
    body = _stream(size, _closing(request))
    return StreamingResponse(body, media_type="text/html", headers=headers)


@lru_cache(maxsize=8)
def _gzip_bomb(mb: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: gzip container
    block = b" " * MIB
    parts = [compressor.compress(block) for _ in range(mb)]
    parts.append(compressor.flush())
    return b"".join(parts)


async def gzip_bomb(request: Request) -> Response:
    mb = int(_query_num(request, "mb", 200))
    body = await asyncio.to_thread(_gzip_bomb, max(0, min(mb, 4096)))
    headers = {"Content-Encoding": "gzip"}
    return Response(body, media_type="text/html", headers=headers)


async def echo_headers(request: Request) -> Response:
    headers: dict[str, str] = {}
    for name, value in request.headers.items():
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    _state(request).echoed.append((_host_without_port(request.scope), headers))
    return JSONResponse(headers)


async def image(request: Request) -> Response:
    return Response(pages.TINY_JPEG, media_type="image/jpeg")


async def gallery(request: Request) -> Response:
    """A product page whose images are ``pictures.GALLERY`` (``/pics/…``)."""
    n: int = request.path_params["n"]
    price, available = _state(request).price(n)
    base = _base_url(request)
    images = [f"{base}/pics/{name}" for name in pictures.GALLERY]
    # And one on another loopback host: private, and not the submitted page's host.
    other = "127.0.0.2" if request.url.hostname != "127.0.0.2" else "127.0.0.1"
    images.append(f"http://{other}:{request.url.port}/pics/{pictures.ELSEWHERE}")
    return HTMLResponse(pages.product_page(n, price, available, base, _kb(request), images))


async def picture(request: Request) -> Response:
    found = pictures.files().get(request.path_params["name"])
    if found is None:
        return _status_response(404)
    body, content_type = found
    return Response(body, media_type=content_type)


async def ads(request: Request) -> Response:
    """The ad library (tests/support/adlibrary.py): one page of matching ads."""
    params = request.query_params
    try:
        start = date.fromisoformat(params.get("start", ""))
        end = date.fromisoformat(params.get("end", params.get("start", "")))
        page = int(params.get("page", "1"))
        languages = [x for x in params.get("languages", "").split(",") if x]
        found = adlibrary.query(
            _state(request).ads, start, end, params.get("format", "all"), languages
        )
    except ValueError as exc:
        return PlainTextResponse(f"bad query: {exc}", status_code=400)
    pages = max(1, -(-len(found) // adlibrary.PAGE_SIZE))
    if not 1 <= page <= pages:
        return PlainTextResponse("no such page", status_code=404)
    following = None
    if page < pages:  # relative, as sites write it
        following = "?" + request.url.include_query_params(page=page + 1).query
    return HTMLResponse(adlibrary.page_html(found, page, following))


LISTING_ADS = 4  # ads per listing page


async def listing(request: Request) -> Response:
    """A classified-ads listing page: ``LISTING_ADS`` ads, ``n*10 .. n*10+3``, each priced as
    product ``i`` is (``/__price/{i}`` changes it); a sold ad (``available`` false) says so."""
    n: int = request.path_params["n"]
    blocks = []
    for i in range(n * 10, n * 10 + LISTING_ADS):
        price, available = _state(request).price(i)
        sold = "" if available else '<span class="sold">sold</span>'
        blocks.append(
            f'<article class="ad" data-id="ad-{i}"><h2 class="title">Bike {i}</h2>'
            f'<a class="more" href="/ad/{i}">details</a><span class="price">$ {price}</span>'
            f'<span class="seller">Seller {i % 3}</span>{sold}</article>'
        )
    return HTMLResponse(
        f"<!doctype html><html><head><title>Ads, page {n}</title></head><body>"
        f"<h1>Classified ads</h1><main>{''.join(blocks)}</main></body></html>"
    )


# --------------------------------------------------------------------------- control


async def control_log(request: Request) -> Response:
    return JSONResponse(_state(request).snapshot())


async def control_reset(request: Request) -> Response:
    _state(request).reset()
    return JSONResponse({"ok": True})


async def control_price(request: Request) -> Response:
    n: int = request.path_params["n"]
    try:
        data = await request.json()
        old_price, _ = _state(request).price(n)
        price = Decimal(str(data["price"])) if "price" in data else old_price
        available = bool(data.get("available", True))
    except (ValueError, TypeError, KeyError, InvalidOperation) as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    _state(request).set_price(n, price, available)
    return JSONResponse({"n": n, "price": str(price), "available": available})


async def control_ads(request: Request) -> Response:
    try:
        data = await request.json()
        settings = adlibrary.AdSettings(
            int(data.get("per_day", 40)), int(data.get("bad_per_day", 0))
        )
    except (ValueError, TypeError) as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    _state(request).ads = settings
    return JSONResponse({"per_day": settings.per_day, "bad_per_day": settings.bad_per_day})


async def control_release(request: Request) -> Response:
    _state(request).release(request.path_params["key"])
    return JSONResponse({"ok": True})


async def control_turn(request: Request) -> Response:
    _state(request).let_one(request.path_params["key"])
    return JSONResponse({"ok": True})


async def control_robots(request: Request) -> Response:
    _state(request).robots = (await request.body()).decode()
    return JSONResponse({"ok": True})


async def bad_param(request: Request, exc: Exception) -> Response:
    return PlainTextResponse(str(exc), status_code=400)


def create_app(state: SiteState | None = None, closing: asyncio.Event | None = None) -> ASGIApp:
    """The site as an ASGI app; ``state`` and the shutdown event are created when not given."""
    routes = [
        Route("/product/{n:int}", product),
        Route("/shop/{n:int}", locale_shop),
        Route("/lookup", lookup, methods=["POST"]),
        Route("/api/product", product_api, methods=["POST"]),
        Route("/with-script", with_script),
        Route("/js-price/{n:int}", js_price),
        Route("/js-product/{n:int}", js_product),
        Route("/amazon/dp/{asin}", amazon),
        Route("/amazon-br/dp/{asin}", amazon_br),
        Route("/captcha", captcha),
        Route("/notproduct", notproduct),
        Route("/robots.txt", robots),
        Route("/slow/{ms:int}", slow),
        Route("/hold/{key}", hold),
        Route("/turn/{key}", turn),
        Route("/status/{code:int}", status),
        Route("/flaky/{key}", flaky),
        Route("/redirect/{n:int}", redirect),
        Route("/live/{key}", live),
        Route("/redirect-loop", redirect_loop),
        Route("/framed", framed),
        Route("/big", big),
        Route("/big-declared", big_declared),
        Route("/gzip-bomb", gzip_bomb),
        Route("/echo-headers", echo_headers),
        Route("/img/{name}", image),
        Route("/gallery/{n:int}", gallery),
        Route("/pics/{name}", picture),
        Route("/ads", ads),
        Route("/listing/{n:int}", listing),
        *shop.ROUTES,
        *sticky.ROUTES,
        Route("/__log", control_log),
        Route("/__reset", control_reset, methods=["POST"]),
        Route("/__price/{n:int}", control_price, methods=["POST"]),
        Route("/__robots", control_robots, methods=["POST"]),
        Route("/__ads", control_ads, methods=["POST"]),
        Route("/__release/{key}", control_release, methods=["POST"]),
        Route("/__turn/{key}", control_turn, methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={BadParam: bad_param})
    app.state.site = state = state or SiteState()
    app.state.closing = closing if closing is not None else asyncio.Event()
    return RequestLogMiddleware(app, state)


# --------------------------------------------------------------------------- serving


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    # proto IPPROTO_TCP (not 0) so asyncio sets TCP_NODELAY on accepted connections;
    # without it Nagle + delayed ACK add ~40 ms to every response.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_sockets(
    hosts: Sequence[str], port: int = 0, attempts: int = 50, *, in_namespace: bool = False
) -> list[socket.socket]:
    """One listening socket per loopback host, all on the same port (a free one when 0).

    ``in_namespace``: the site runs in a test's own network namespace, whose private addresses
    it may listen on too (nothing else can reach them).
    """
    if not hosts:
        raise ValueError("at least one host is needed")
    for host in hosts:
        address = ipaddress.ip_address(host)
        if not (address.is_loopback or (in_namespace and address.is_private)):
            raise ValueError(f"{host} is not a loopback address")
    for _ in range(attempts):
        socks: list[socket.socket] = []
        try:
            socks.append(_listen(hosts[0], port))
            chosen = socks[0].getsockname()[1]
            socks.extend(_listen(host, chosen) for host in hosts[1:])
        except OSError as exc:
            for sock in socks:
                sock.close()
            if port or exc.errno != errno.EADDRINUSE:
                raise
            continue
        return socks
    raise OSError(errno.EADDRINUSE, f"no port free on all of {', '.join(hosts)}")


class _Server(uvicorn.Server):
    """uvicorn.Server that reports readiness and stops promptly when asked from any thread."""

    def __init__(
        self,
        config: uvicorn.Config,
        closing: asyncio.Event,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.on_ready = on_ready
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit = closing

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets=sockets)
        if self.on_ready is not None:
            self.on_ready()

    async def main_loop(self) -> None:
        while not await self.on_tick(0):  # counter 0 refreshes the Date header
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), 0.1)
        self._exit.set()  # also when a signal, not request_exit(), stopped us

    def request_exit(self) -> None:
        self.should_exit = True
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop closed in between
                self._loop.call_soon_threadsafe(self._exit.set)


def _config(app: ASGIApp) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_config=None,  # leave the host process's logging alone
        log_level="warning",
        access_log=False,
        lifespan="off",
        ws="none",
        timeout_graceful_shutdown=1,
        timeout_keep_alive=75,  # idle pooled connections must not race a server-side close
    )


class TestSite:
    """The test site served by uvicorn in a background thread, on one port on every host."""

    __test__ = False  # not a pytest test class

    def __init__(self, hosts: Sequence[str] = ("127.0.0.1",), port: int = 0) -> None:
        self.hosts = list(hosts)
        self.port = port
        self.state = SiteState()
        self._sockets: list[socket.socket] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # lifecycle

    def start(self) -> None:
        self._sockets = bind_sockets(self.hosts, self.port)
        self.port = self._sockets[0].getsockname()[1]
        closing = asyncio.Event()
        app = create_app(self.state, closing)
        self._server = _Server(_config(app), closing, on_ready=self._ready.set)
        self._thread = threading.Thread(target=self._run, name="test-site", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            self.stop()
            raise RuntimeError("test site did not start") from self._error

    def _run(self) -> None:
        assert self._server is not None
        try:
            asyncio.run(self._server.serve(sockets=self._sockets))
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    def stop(self) -> None:
        if self._server is not None:
            self._server.request_exit()
        if self._thread is not None:
            self._thread.join(15)
        for sock in self._sockets:
            sock.close()
        self._server = self._thread = None
        self._sockets = []

    def __enter__(self) -> TestSite:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # addresses

    def url(self, path: str = "/", host: str | None = None) -> str:
        """``http://HOST:PORT/path`` for one of the served hosts (the first by default)."""
        host = host or self.hosts[0]
        if not path.startswith("/"):
            path = "/" + path
        return f"http://{host}:{self.port}{path}"

    # state, without going through HTTP

    def log(self) -> dict[str, Any]:
        """What ``GET /__log`` answers: ``{"requests": [...], "max_concurrency": {...}}``."""
        return self.state.snapshot()

    def requests(self, host: str | None = None) -> list[RequestRecord]:
        """Logged requests, optionally only those for ``host``."""
        return [r for r in list(self.state.requests) if host is None or r.host == host]

    def reset(self) -> None:
        """What ``POST /__reset`` does: clear the log, counters, prices and robots.txt."""
        self.state.reset()

    def set_price(self, n: int, price: Decimal | str, available: bool = True) -> None:
        """What ``POST /__price/{n}`` does."""
        self.state.set_price(n, Decimal(price), available)

    def set_robots(self, text: str, status: int = 200) -> None:
        """What ``POST /__robots`` does; a ``status`` other than 200 is answered instead."""
        self.state.robots = text
        self.state.robots_status = status

    def set_gate(
        self,
        cookies: dict[str, str],
        headers: dict[str, str],
        paths: tuple[str, ...] = ("/robots.txt", "/pics/"),
    ) -> None:
        """Answer requests to ``paths`` (prefixes) with 403 unless these cookies and headers
        (the user agent among them) are sent: a shop that serves only a shopper."""
        self.state.gate = (paths, cookies, {k.lower(): v for k, v in headers.items()})

    def set_ads(self, per_day: int = 40, bad_per_day: int = 0, **days: int) -> None:
        """What ``POST /__ads`` does; ``days`` maps ``d2026_01_15=0`` to a day's own count."""
        counts = {date.fromisoformat(k[1:].replace("_", "-")): v for k, v in days.items()}
        self.state.ads = adlibrary.AdSettings(per_day, bad_per_day, counts or None)

    def set_live(self, key: str, value: Any, status: int = 200) -> None:
        """What ``/live/{key}`` answers from now on: ``value``, or ``status`` when not 200."""
        self.state.set_live(key, value, status)

    def release(self, key: str) -> None:
        """What ``POST /__release/{key}`` does: requests held for ``key`` answer."""
        self.state.release(key)

    def let_one(self, key: str) -> None:
        """What ``POST /__turn/{key}`` does: one request for ``/turn/{key}`` answers."""
        self.state.let_one(key)

    def held(self, key: str) -> int:
        """How many requests for ``/hold/{key}`` or ``/turn/{key}`` are in flight, waiting."""
        return self.state.held(key)


# --------------------------------------------------------------------------- standalone


def _write_port_file(path: str, port: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(f"{port}\n")
    os.replace(tmp, path)  # readers never see a half-written file


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.site")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--hosts", default="127.0.0.1", help="comma-separated loopback IPs")
    parser.add_argument("--port-file", help="write the port here once listening")
    parser.add_argument(
        "--in-namespace", action="store_true", help="in a test's network namespace: private hosts"
    )
    args = parser.parse_args(argv)

    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    sockets = bind_sockets(hosts, args.port, in_namespace=args.in_namespace)
    port: int = sockets[0].getsockname()[1]

    def ready() -> None:
        if args.port_file:
            _write_port_file(args.port_file, port)
        else:
            print(f"test site listening on port {port}", flush=True)

    # uvicorn handles SIGTERM itself, then re-raises it once shut down: exit 0 at that point.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    closing = asyncio.Event()
    _Server(_config(create_app(closing=closing)), closing, on_ready=ready).run(sockets=sockets)


class SiteProcess:
    """The test site in its own process: its request times do not depend on the test's GIL.

    Measurements of politeness must be taken here: a site thread inside a busy test process
    can stamp a request hundreds of milliseconds after it arrived.
    """

    def __init__(self, hosts: Sequence[str] = ("127.0.0.1",), wrap: Sequence[str] = ()) -> None:
        self.hosts = list(hosts)
        self.wrap = list(wrap)  # a command prefix, e.g. ``ip netns exec NS`` (it execs: same pid)
        self.port = 0
        self._proc: Any = None

    def start(self) -> None:
        import subprocess
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory(prefix="forager-site-") as tmp:
            port_file = Path(tmp) / "port"
            self._proc = subprocess.Popen(
                [
                    *self.wrap,
                    sys.executable,
                    "-m",
                    "tests.support.site",
                    "--port",
                    "0",
                    "--hosts",
                    ",".join(self.hosts),
                    "--port-file",
                    str(port_file),
                    *(["--in-namespace"] if self.wrap else []),
                ],
                cwd=Path(__file__).resolve().parents[2],
            )
            deadline = time.monotonic() + 20
            while not (port_file.exists() and port_file.read_text().strip()):
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the test site process did not start")
                time.sleep(0.02)
            self.port = int(port_file.read_text())

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        self._proc = None

    def __enter__(self) -> SiteProcess:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def url(self, path: str = "/", host: str | None = None) -> str:
        host = host or self.hosts[0]
        return f"http://{host}:{self.port}{path if path.startswith('/') else '/' + path}"

    def log(self) -> dict[str, Any]:
        import httpx

        response = httpx.get(self.url("/__log"), timeout=10)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def requests(self, host: str | None = None) -> list[RequestRecord]:
        return [
            RequestRecord(**r) for r in self.log()["requests"] if host is None or r["host"] == host
        ]

    def reset(self) -> None:
        import httpx

        httpx.post(self.url("/__reset"), timeout=10).raise_for_status()

    def set_ads(self, per_day: int = 40, bad_per_day: int = 0) -> None:
        import httpx

        body = {"per_day": per_day, "bad_per_day": bad_per_day}
        httpx.post(self.url("/__ads"), json=body, timeout=10).raise_for_status()

    def release(self, key: str) -> None:
        import httpx

        httpx.post(self.url(f"/__release/{key}"), timeout=10).raise_for_status()

    def let_one(self, key: str) -> None:
        import httpx

        httpx.post(self.url(f"/__turn/{key}"), timeout=10).raise_for_status()

    def held(self, key: str) -> int:
        held: int = self.log()["held"].get(key, 0)
        return held


if __name__ == "__main__":
    main()
