"""Tell robot checks and access-denied pages apart from real pages, for every parser."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from forager.errors import BlockedPage, CaptchaPage
from forager.parse import signals

Kind = Literal["captcha", "blocked"]

# Block pages are small and say what they are near the top; only this much is scanned.
_SCAN_CHARS = 300_000
# Pages bigger than this are real pages even when they embed a reCAPTCHA widget somewhere.
_SMALL_PAGE_CHARS = 150_000

# (lower-case marker, kind, what the page is) — each marker alone identifies the page.
_STRONG_MARKERS: tuple[tuple[str, Kind, str], ...] = (
    ("validatecaptcha", "captcha", "an Amazon robot check (CAPTCHA)"),
    ("type the characters you see in this image", "captcha", "an Amazon robot check (CAPTCHA)"),
    ("enter the characters you see below", "captcha", "an Amazon robot check (CAPTCHA)"),
    ("digite os caracteres que você vê", "captcha", "an Amazon robot check (CAPTCHA)"),
    ("geben sie die zeichen unten ein", "captcha", "an Amazon robot check (CAPTCHA)"),
    ("saisissez les caractères", "captcha", "an Amazon robot check (CAPTCHA)"),
    ("inserisci i caratteri", "captcha", "an Amazon robot check (CAPTCHA)"),
    ("introduzca los caracteres", "captcha", "an Amazon robot check (CAPTCHA)"),
    ("api-services-support@amazon.com", "captcha", "an Amazon robot check (CAPTCHA)"),
    ("checking your browser before accessing", "captcha", "a Cloudflare browser check"),
    ("cf-challenge", "captcha", "a Cloudflare challenge page"),
    ("/cdn-cgi/challenge-platform", "captcha", "a Cloudflare challenge page"),
    ("cf-chl-", "captcha", "a Cloudflare challenge page"),
    ("px-captcha", "captcha", "a PerimeterX 'press and hold' robot check"),
    ("captcha-delivery.com", "captcha", "a DataDome robot check (CAPTCHA)"),
    ("pardon our interruption", "captcha", "a Distil/Imperva robot check"),
    ("sorry, you have been blocked", "blocked", "a Cloudflare 'you have been blocked' page"),
    ("cf-error-details", "blocked", "a Cloudflare error / block page"),
    ("errors.edgesuite.net", "blocked", "an Akamai 'Access Denied' page"),
    ("incapsula incident id", "blocked", "an Imperva/Incapsula block page"),
    ("the requested url was rejected", "blocked", "an F5 'request rejected' block page"),
)
# Widgets that real pages also embed (login forms, reviews): they count only on small pages
# that also talk about robots / verification.
_WIDGET_MARKERS = ("g-recaptcha", "google.com/recaptcha", "h-captcha", "hcaptcha.com")
# A robot-check page links almost nowhere; a shop page with a CAPTCHA-protected form has menus.
_FEW_LINKS = 25
_ROBOT_WORDS = re.compile(r"captcha|robot|human|verify|verif|security check|just a moment")
# Bounded repetitions keep every match attempt O(1): with ``[^>]*`` a page of repeated "<title"
# rescanned the rest of the page from each one (120 KB took 2.3 s).
_ACCESS_DENIED = re.compile(
    r"<title[^<>]{0,200}>\s{0,100}(?:access denied|403 forbidden|forbidden)\s{0,100}</title>"
)

# Signs of a real product page; a page showing one of them is never a block page.
_PRODUCT_SIGNS = (
    "schema.org/Product",
    'property="og:type" content="product',
    "product:price:amount",
    'id="productTitle"',
)
# ``(?:\[\s*)?`` rather than ``\[?\s*``: two adjacent ``\s*`` split a run of spaces every way.
_JSONLD_PRODUCT = re.compile(r'"@type"\s*:\s*(?:\[\s*)?"(?:https?://schema\.org/)?Product"')


def looks_like_product(html: str) -> bool:
    """Cheap check for product markup (Amazon title, schema.org Product, OpenGraph product)."""
    # Commonest first: each sign that is absent costs a pass over the page.
    return (
        any(sign in html for sign in _PRODUCT_SIGNS[:2])
        or bool(_JSONLD_PRODUCT.search(html))
        or any(sign in html for sign in _PRODUCT_SIGNS[2:])
    )


def classify(html: str, markup_first: bool = True) -> tuple[Kind, str] | None:
    """("captcha" | "blocked", description) for a robot-check / access-denied page, else None.

    Product markup makes any block marker moot. ``markup_first`` looks for it first, which is
    cheaper when pages usually carry it near the top (schema.org, og:type); otherwise the first
    300 KB are searched for block markers first and the whole page for markup only after a hit.
    """
    if markup_first and looks_like_product(html):
        return None
    head = html[:_SCAN_CHARS].lower()
    found: tuple[Kind, str] | None = None
    for marker, kind, what in _STRONG_MARKERS:
        if marker in head:
            found = (kind, what)
            break
    if found is None and _ACCESS_DENIED.search(head):
        found = ("blocked", "an 'Access Denied' page")
    if (
        found is None
        and len(html) < _SMALL_PAGE_CHARS
        and head.count("<a ") < _FEW_LINKS
        and any(marker in head for marker in _WIDGET_MARKERS)
        and _ROBOT_WORDS.search(head)
    ):
        found = ("captcha", "a CAPTCHA page")
    if found is not None and not markup_first and looks_like_product(html):
        return None
    return found


def raise_if_blocked(html: str, url: str, markup_first: bool = True) -> None:
    """Raise ``CaptchaPage`` / ``BlockedPage`` when ``html`` is a robot check or block page."""
    result = classify(html, markup_first)
    if result is None:
        return
    kind, what = result
    if kind == "captcha":
        raise CaptchaPage(f"{url} returned {what} instead of the product page")
    raise BlockedPage(f"{url} returned {what}: the site refused this request")


# Distinct prices next to a page's heading from which it is a list of products, not one.
_LISTING_PRICES = 6
_HOME_PATHS = frozenset({"", "/", "/index.html", "/index.php", "/home", "/default.aspx"})


def not_product_reason(
    url: str, title: str | None, heading: str | None, prices_near_heading: int
) -> str | None:
    """Why a page without product data is not a product page (error, search, home, listing)."""
    for text in (title, heading):
        if text and signals.ERROR_TITLE.search(text):
            return f"an error page ({text[:80]!r})"
    parts = urlsplit(url)
    path = parts.path.lower()
    if signals.SEARCH_PATH.search(path) or any(
        key.lower() in signals.SEARCH_KEYS for key, _ in parse_qsl(parts.query)
    ):
        return "a search results page"
    if path in _HOME_PATHS:
        return "the site's home page"
    if prices_near_heading >= _LISTING_PRICES:
        return f"a listing: {prices_near_heading} different prices next to its heading"
    return None
