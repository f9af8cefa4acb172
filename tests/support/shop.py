"""A small shop on the test site, for discovery (issue 32): home → categories → paginated
listings → product pages, with the traps a crawler meets.

- ``/shop/`` links three categories, an off-scope copy of a product (on ``127.0.0.2``), a
  ``nofollow`` product (``/shop/p/900``, linked nowhere else), the calendar and a session-id URL.
- ``/shop/c/{cat}?page=N``: ``PER_PAGE`` products per page in ``<main class="grid">``; kettles
  announce the next page with ``<link rel=next>``, toasters and mugs with page-number links.
  Each listing's sidebar links a product of another category (found again: the same task) and
  the home page, and its page links carry a session id (``?sid=…&page=N``) as well.
- ``/shop/p/{n}``: a product page (JSON-LD), ``n = category * 100 + i``.
- ``/shop/calendar?month=YYYY-MM``: each month links the next one, for ever.
- ``/shop/sitemap.xml``: a sitemap index of ``/shop/sitemap-kettles.xml.gz`` (gzipped, served as
  ``application/gzip``), ``/shop/sitemap-more.xml`` (the other products with their ``lastmod``,
  plus an off-scope URL) and ``/shop/sitemap-broken.xml`` (malformed XML).
"""

from __future__ import annotations

import gzip
import itertools
from decimal import Decimal

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from tests.support import pages

CATEGORIES = {"kettles": 1, "toasters": 2, "mugs": 3}
PRODUCTS_PER_CATEGORY = 7
PER_PAGE = 3
NOFOLLOW_PRODUCT = 900
_sessions = itertools.count(1)
# Products whose sitemap <lastmod> a test moved on (the site runs in the test's process).
CHANGED: set[int] = set()


def products() -> list[int]:
    """Every product a crawl of the shop should find (not the nofollow one)."""
    return [c * 100 + i for c in CATEGORIES.values() for i in range(PRODUCTS_PER_CATEGORY)]


def _page(title: str, body: str, head: str = "") -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><title>{title}</title>{head}</head><body>{body}</body></html>"
    )


async def home(request: Request) -> Response:
    port = request.url.port
    cats = "".join(f'<li><a href="/shop/c/{c}">{c}</a></li>' for c in CATEGORIES)
    return _page(
        "Shop",
        f"<nav><ul>{cats}</ul></nav>"
        f'<a href="http://127.0.0.2:{port}/shop/p/101">elsewhere</a>'
        f'<a rel="nofollow" href="/shop/p/{NOFOLLOW_PRODUCT}">sponsored</a>'
        '<a href="/shop/calendar?month=2026-01">events</a>'
        f'<a href="/shop/c/mugs?sid=s{next(_sessions)}">mugs (session)</a>',
    )


async def category(request: Request) -> Response:
    cat = request.path_params["cat"]
    if cat not in CATEGORIES:
        return HTMLResponse("no such category", status_code=404)
    first = CATEGORIES[cat] * 100
    page = int(request.query_params.get("page", "1"))
    pages_n = -(-PRODUCTS_PER_CATEGORY // PER_PAGE)
    start = (page - 1) * PER_PAGE
    shown = range(first + start, first + min(start + PER_PAGE, PRODUCTS_PER_CATEGORY))
    grid = "".join(f'<a class="item" href="/shop/p/{n}">Product {n}</a>' for n in shown)
    other = CATEGORIES["mugs" if cat != "mugs" else "kettles"] * 100
    sid = next(_sessions)
    head = ""
    if cat == "kettles" and page < pages_n:
        head = f'<link rel="next" href="/shop/c/{cat}?page={page + 1}">'
        numbers = ""
    else:
        numbers = "".join(
            f'<a href="/shop/c/{cat}?page={p}">{p}</a>' for p in range(1, pages_n + 1)
        )
    return _page(
        f"{cat}, page {page}",
        f'<main class="grid">{grid}</main><nav class="pages">{numbers}'
        f'<a href="/shop/c/{cat}?page={page}&amp;sid=s{sid}">this page</a></nav>'
        f'<aside><a href="/shop/p/{other}">also viewed</a><a href="/shop/">home</a></aside>',
        head,
    )


async def product(request: Request) -> Response:
    n: int = request.path_params["n"]
    base = f"{request.url.scheme}://{request.url.netloc}"
    html = pages.product_page(n, Decimal("19.99"), True, base, kb=1)
    return HTMLResponse(html)


async def calendar(request: Request) -> Response:
    year, month = (int(x) for x in request.query_params.get("month", "2026-01").split("-"))
    year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return _page("Events", f'<a href="/shop/calendar?month={year:04d}-{month:02d}">next</a>')


_SM = '<?xml version="1.0" encoding="UTF-8"?>'
_NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def _base(request: Request) -> str:
    return f"{request.url.scheme}://{request.url.netloc}"


def _lastmod(n: int) -> str:
    return "2026-12-01T08:00:00Z" if n in CHANGED else f"2026-11-{1 + n % 28:02d}"


def _urlset(base: str, numbers: list[int], extra: str = "") -> str:
    urls = "".join(
        f"<url><loc>{base}/shop/p/{n}</loc><lastmod>{_lastmod(n)}</lastmod></url>" for n in numbers
    )
    return f"{_SM}<urlset {_NS}>{urls}{extra}</urlset>"


async def sitemap_index(request: Request) -> Response:
    base = _base(request)
    children = ("sitemap-kettles.xml.gz", "sitemap-more.xml", "sitemap-broken.xml")
    entries = "".join(f"<sitemap><loc>{base}/shop/{c}</loc></sitemap>" for c in children)
    return Response(f"{_SM}<sitemapindex {_NS}>{entries}</sitemapindex>", media_type="text/xml")


async def sitemap_kettles(request: Request) -> Response:
    numbers = [n for n in products() if n // 100 == CATEGORIES["kettles"]]
    body = gzip.compress(_urlset(_base(request), numbers).encode(), mtime=0)
    return Response(body, media_type="application/gzip")


async def sitemap_more(request: Request) -> Response:
    numbers = [n for n in products() if n // 100 != CATEGORIES["kettles"]]
    elsewhere = f"<url><loc>http://127.0.0.2:{request.url.port}/shop/p/101</loc></url>"
    return Response(_urlset(_base(request), numbers, elsewhere), media_type="text/xml")


async def sitemap_broken(request: Request) -> Response:
    return Response(f"{_SM}<urlset {_NS}><url><loc>", media_type="text/xml")


ROUTES = [
    Route("/shop/sitemap.xml", sitemap_index),
    Route("/shop/sitemap-kettles.xml.gz", sitemap_kettles),
    Route("/shop/sitemap-more.xml", sitemap_more),
    Route("/shop/sitemap-broken.xml", sitemap_broken),
    Route("/shop/", home),
    Route("/shop/c/{cat}", category),
    Route("/shop/p/{n:int}", product),
    Route("/shop/calendar", calendar),
]
