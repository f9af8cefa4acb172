"""Pages for sticky sessions (issue 33) on the test site: a shop that hands out a session
cookie, counts each session's visits in a cookie of its own, and notices a session used by two
requests at once.

- ``/sticky/warm``: the warm-up page; sets ``sid=w<k>-<MARK>`` (a new session) and ``warmed=1``.
- ``/sticky/p/{n}``: a product page. Without a ``sid`` cookie it sets a new ``sid=s<k>-<MARK>``; it
  always sets ``hits=<hits + 1>``. ``?block=1`` answers a robot check (403) instead; ``?ms=``
  delays the answer (two requests of one session overlapping are counted in ``overlaps``).

The site runs in the test's process (``TestSite``): a test reads and resets ``LOG`` directly.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field
from decimal import Decimal

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from tests.support import pages

# In every session cookie the site hands out: a test looks for it where no cookie may be.
MARK = "Zq7xSid"


@dataclass(slots=True)
class Visit:
    sid: str  # the session cookie the request came with ("" when none)
    n: int
    hits: int  # the hits cookie the request came with: visits of this session before it
    warmed: bool


@dataclass
class StickyLog:
    visits: list[Visit] = field(default_factory=list)
    warmups: int = 0
    overlaps: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: dict[str, int] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def reset(self) -> None:
        with self._lock:
            self.visits, self.warmups, self.overlaps = [], 0, 0

    def new_sid(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}{next(self._ids)}-{MARK}"

    def enter(self, sid: str) -> None:
        with self._lock:
            self._in_flight[sid] = self._in_flight.get(sid, 0) + 1
            if sid and self._in_flight[sid] > 1:
                self.overlaps += 1

    def leave(self, sid: str, visit: Visit) -> None:
        with self._lock:
            self._in_flight[sid] -= 1
            self.visits.append(visit)

    def by_session(self) -> dict[str, list[Visit]]:
        with self._lock:
            grouped: dict[str, list[Visit]] = {}
            for visit in self.visits:
                grouped.setdefault(visit.sid, []).append(visit)
            return grouped


LOG = StickyLog()


async def warm(request: Request) -> Response:
    with LOG._lock:
        LOG.warmups += 1
    response = HTMLResponse("<!doctype html><html><body><p>welcome</p></body></html>")
    response.set_cookie("sid", LOG.new_sid("w"), httponly=True)
    response.set_cookie("warmed", "1", max_age=3600)
    return response


async def product(request: Request) -> Response:
    n: int = request.path_params["n"]
    sid = request.cookies.get("sid", "")
    hits = int(request.cookies.get("hits", "0") or 0)
    LOG.enter(sid)
    try:
        ms = float(request.query_params.get("ms", "0"))
        if ms > 0:
            await asyncio.sleep(min(ms, 5000) / 1000)
    finally:
        LOG.leave(sid, Visit(sid, n, hits, request.cookies.get("warmed") == "1"))
    if request.query_params.get("block"):
        return HTMLResponse(pages.CAPTCHA_PAGE, status_code=403)
    port = request.url.port
    base = f"{request.url.scheme}://{request.url.hostname}:{port}"
    price = Decimal(n % 500) + Decimal("0.99")
    response = HTMLResponse(pages.product_page(n, price, True, base, 0))
    if not sid:
        response.set_cookie("sid", LOG.new_sid("s"), httponly=True)
    response.set_cookie("hits", str(hits + 1), expires="Wed, 21 Oct 2037 07:28:00 GMT")
    return response


ROUTES = [Route("/sticky/warm", warm), Route("/sticky/p/{n:int}", product)]
