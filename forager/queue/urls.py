"""URL normalization and hashing: one task per normalized URL (seed 004 rules, extended)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

from forager.errors import InvalidURL

MAX_URL_LENGTH = 2048
_DEFAULT_PORTS = {"http": 80, "https": 443}
_TRACKING_KEYS = frozenset({"gclid", "fbclid"})


@dataclass(frozen=True, slots=True)
class NormalizedURL:
    url: str
    url_hash: str
    host: str
    base_url: str


@dataclass(frozen=True, slots=True)
class Link:
    """A link a crawl job's rules took from a page: where it goes and what its page is for
    (``follow`` | ``parse``). Here, with the URL it wraps, so the parse processes that make
    links import nothing of the queue but this module."""

    where: NormalizedURL
    action: str
    lastmod: datetime | None = None  # a sitemap's <lastmod> for it
    recrawl_seconds: int | None = None  # a parse rule's own recrawl schedule: a recurring task


def _is_tracking(pair: str) -> bool:
    key = pair.split("=", 1)[0].lower()
    return key.startswith("utm_") or key in _TRACKING_KEYS


def normalize_url(raw: str) -> NormalizedURL:
    """Normalize ``raw`` or raise ``InvalidURL`` saying what is wrong with it.

    Lowercases scheme and host, IDNA-encodes the host, drops the default port, the
    fragment, empty query parts and tracking parameters (``utm_*``, ``gclid``,
    ``fbclid``), and sorts the query; the path keeps its case.
    """
    text = raw.strip()
    if not text:
        raise InvalidURL("URL is empty")
    if len(text) > MAX_URL_LENGTH:
        raise InvalidURL(f"URL is {len(text)} characters long; the limit is {MAX_URL_LENGTH}")
    if any(ch.isspace() for ch in text):
        raise InvalidURL("URL contains whitespace")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise InvalidURL(f"URL cannot be parsed: {exc}") from exc
    scheme = parts.scheme.lower()
    if not scheme:
        raise InvalidURL("URL has no scheme (expected http:// or https://)")
    if scheme not in _DEFAULT_PORTS:
        raise InvalidURL(f"URL scheme {scheme!r} is not crawlable (expected http or https)")
    if parts.username is not None or parts.password is not None:
        raise InvalidURL("URL carries credentials (user:password@); configure a proxy instead")
    hostname = parts.hostname
    if not hostname:
        raise InvalidURL("URL has no host")
    try:
        host = hostname.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise InvalidURL(f"URL host {hostname!r} is not a valid domain name") from exc
    host_part = f"[{host}]" if ":" in host else host  # IPv6 literals keep their brackets
    netloc = host_part if port in (None, _DEFAULT_PORTS[scheme]) else f"{host_part}:{port}"
    query = "&".join(
        sorted(pair for pair in parts.query.split("&") if pair and not _is_tracking(pair))
    )
    url = urlunsplit((scheme, netloc, parts.path or "/", query, ""))
    if len(url) > MAX_URL_LENGTH:
        raise InvalidURL(f"URL is {len(url)} characters long; the limit is {MAX_URL_LENGTH}")
    return NormalizedURL(
        url=url,
        url_hash=hash_url(url),
        host=host,
        base_url=f"{scheme}://{netloc}",
    )


def hash_url(normalized: str) -> str:
    """SHA-256 hex digest of a normalized URL (the dedup key)."""
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()
