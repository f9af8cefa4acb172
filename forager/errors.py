"""Forager's exception tree; every error the package raises on purpose is a ``ForagerError``.

What each one causes is on its line: an HTTP status when one reaches the API's handler
(``forager.api.errors``; any other is a 500), a task's ``error_type`` in parentheses.

ForagerError                 (internal) anything below not named otherwise
├── ConfigError              refused settings: the process does not start
├── InvalidRequest           422: a request value wrong in a way a schema cannot say
│   └── InvalidURL           422: a submitted URL cannot be crawled
├── Unauthorized             401: no valid API key
├── Forbidden                403: a valid key that may not do this
├── NotFound                 404: an entity id that does not exist
├── Conflict                 409: an action not allowed from the entity's current state
│   └── LifecycleConflict    409: a task action refused by the task lifecycle
├── FetchError               the fetch phase failed; carries the attempt's ``error_type``
│   ├── FetchTimeout         (timeout)
│   ├── NetworkError         (network)
│   ├── ProxyError           (proxy)          the proxy, not the site, failed
│   ├── HTTPStatusError      (http_4xx / http_5xx / rate_limited)
│   ├── TooLarge             (too_large)      body or decompressed body over the limit
│   └── EgressDenied         (egress_denied)  Forager's address policy refused the target
├── NoProxyAvailable         no fetch: the task waits ``retry_in``, or fails if no proxy can serve
├── PageStoreError           the page store could not write or read a page
├── NotAnImage               a product image's answer is not a kept image: the image fails
├── ParseError               (parse)          the page could not be turned into a product
│   ├── CaptchaPage          (captcha)        a robot check instead of the page
│   ├── BlockedPage          (blocked)        an access-denied / block page
│   ├── NotProductPage       (parse)          a real page, but not a product page
│   └── SitemapError         (parse)          a sitemap malformed, over its limits or unsafe
├── BadItem                  (internal)       a parser's item breaks the items contract
├── UnknownParser            a parser name not registered, or its parser broken
├── PluginProblem            a parser plugin breaks the contract: listed as broken, not used
├── AgentRefused             the server refused an agent for good: it stops, no reconnect
├── LeaseLost                a monitor's lease is another process's: its loop stops, no write
├── ServiceError             a mission service gave no usable answer; ``kind`` picks the code
├── MissionFailure           a mission step failed with a seed code: retried or the mission fails
├── ScrapeFailed             reference worker service: the scrape job fails
└── Refused                  reference writer (also a ValueError): the value or job is refused

Where each lives: ``NoProxyAvailable`` in ``proxies.selection``, ``NotAnImage`` in
``products.imagefile``, ``BadItem`` in ``parse.items``, ``UnknownParser`` in ``parse.registry``,
``PluginProblem`` in ``parse.plugins``, ``AgentRefused`` in ``agents.client``, ``LeaseLost`` in
``monitors.runner``, ``ServiceError`` in ``missions.clients``, ``MissionFailure`` in
``missions.codes``, ``ScrapeFailed`` and ``Refused`` in ``missions.reference``; the rest here.
Module-private signals (``_Full``, ``_NotStarted``, ``_Moved``), raised and caught inside one
module, are not shown and stay plain exceptions.

``error_type`` values are the closed set in DESIGN.md ("Error types"), the keys of ``EFFECTS``
below: one row per type says what a try ending with it causes (retried, the proxy rotated,
counted against the proxy or the site, robots.txt unreachable, the agent blocked, read past as
a lost try). Every decision about a failed try reads that table or a set drawn
from it (``LOST_TYPES``); none keeps its own list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

ProxyVerdict = Literal["ok", "fault", "ban", "none"]
SiteBreaker = Literal["fail", "fail_direct", "ok", "none"]


@dataclass(frozen=True, slots=True)
class Effect:
    """What a try that ended with one ``error_type`` causes; the defaults are "nothing"."""

    # The task (or product image) is tried again with back-off while it has retries left: the
    # page may come out differently next time.
    retry: bool = False
    # The retry avoids the proxy this try went through.
    rotate_proxy: bool = False
    # What it says about the proxy it went through (``proxies.health``): ``fault`` counts
    # against the proxy everywhere, ``ban`` against it for this domain only, ``ok`` is the site's
    # answer through a working proxy, ``none`` is not recorded (nothing went through it).
    proxy_verdict: ProxyVerdict = "ok"
    # The domain's circuit breaker: a failure (``fail_direct``: only on a direct fetch, since
    # through a proxy it may be the proxy's), a success (the site answered: it is up), or nothing.
    site_breaker: SiteBreaker = "none"
    # A robots.txt fetch failing so is the site's own failure (RFC 9309 2.3.1.4 "unreachable":
    # server or network errors): it allows nothing while no copy is cached. A failing proxy or an
    # egress refusal says nothing about the site: robots.txt is then "not read".
    robots_unreachable: bool = False
    # The agent whose task ended so is marked blocked (the site sees its address as a robot).
    blocks_agent: bool = False
    # An agent may report it for its fetch; any other type an agent reports is taken as network.
    from_agent: bool = False
    # An error status from the site: an agent's report of it keeps the answer's status, headers
    # and start of body (an ``HTTPStatusError``), for the same ban checks as a local fetch.
    http_status: bool = False
    # No outcome: the try was lost (its worker died or hung; the reaper records it), so it says
    # nothing about the site or the proxy, and the retry's proxy rotation reads the try before it.
    lost: bool = False


# What each error_type does: every decision about a failed try reads its row here (``effect``), so
# a type's meaning is changed in one place.
EFFECTS: Mapping[str, Effect] = MappingProxyType(
    {
        "network": Effect(
            retry=True,
            proxy_verdict="fault",
            site_breaker="fail_direct",
            robots_unreachable=True,
            from_agent=True,
        ),
        "timeout": Effect(
            retry=True,
            proxy_verdict="fault",
            site_breaker="fail_direct",
            robots_unreachable=True,
            from_agent=True,
        ),
        "http_4xx": Effect(site_breaker="ok", from_agent=True, http_status=True),
        "http_5xx": Effect(
            retry=True,
            site_breaker="fail",
            robots_unreachable=True,
            from_agent=True,
            http_status=True,
        ),
        "rate_limited": Effect(
            retry=True,
            rotate_proxy=True,
            proxy_verdict="ban",
            site_breaker="fail",
            from_agent=True,
            http_status=True,
        ),
        "captcha": Effect(
            retry=True,
            rotate_proxy=True,
            proxy_verdict="ban",
            site_breaker="fail",
            blocks_agent=True,
        ),
        "blocked": Effect(
            retry=True,
            rotate_proxy=True,
            proxy_verdict="ban",
            site_breaker="fail",
            blocks_agent=True,
        ),
        "robots_denied": Effect(),
        "too_large": Effect(from_agent=True),
        "parse": Effect(),
        "validation": Effect(),
        # The proxy refused or broke the connection: the site is not blamed, even on a direct fetch.
        "proxy": Effect(retry=True, rotate_proxy=True, proxy_verdict="fault", from_agent=True),
        "cancelled": Effect(),
        "internal": Effect(retry=True),
        # Not in DESIGN.md's original list: the request was never made because the target's address
        # is one Forager must not reach (FORAGER_PRIVATE_TARGETS). None of the others fits:
        # ``blocked`` would retry through another proxy and count against the site.
        "egress_denied": Effect(proxy_verdict="none", from_agent=True),
        # Not in DESIGN.md's list either, and on attempts only: the try a worker was making when its
        # lease expired (killed or hung), recorded by the reaper. Its task says ``internal`` ("lease
        # expired"), as before; the attempt says which try was lost and whose it was.
        "lease_expired": Effect(lost=True),
    }
)
# What a type outside the table (or no type: the fetch answered) causes: nothing.
NO_EFFECT = Effect()

ERROR_TYPES = frozenset(EFFECTS)
# The types of lost tries (``Effect.lost``), for a query that reads past them.
LOST_TYPES = frozenset(t for t, e in EFFECTS.items() if e.lost)


def effect(error_type: str | None) -> Effect:
    """The row of ``error_type`` in ``EFFECTS``; ``NO_EFFECT`` for ``None`` or an unknown type."""
    return EFFECTS.get(error_type, NO_EFFECT) if error_type is not None else NO_EFFECT


class ForagerError(Exception):
    """Root of every error Forager raises on purpose."""

    error_type = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(ForagerError):
    """Settings that are missing, malformed or unsafe together."""


class InvalidRequest(ForagerError):
    """A value that is wrong given the others (e.g. a minimum above its maximum)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class InvalidURL(InvalidRequest):
    """A submitted URL that cannot be crawled (no host, wrong scheme, too long)."""

    def __init__(self, message: str, *, field: str = "url") -> None:
        super().__init__(message, field=field)


class Unauthorized(ForagerError):
    """The request carries no valid API key."""


class Forbidden(ForagerError):
    """The API key is valid but its role does not allow the action."""


class NotFound(ForagerError):
    """The entity asked for does not exist."""


class Conflict(ForagerError):
    """The action is not allowed in the entity's current state."""


class LifecycleConflict(Conflict):
    """A task action the lifecycle forbids from the task's current status."""

    def __init__(self, message: str, *, current_status: str) -> None:
        super().__init__(message)
        self.current_status = current_status


class FetchError(ForagerError):
    """The fetch phase failed; ``error_type`` classifies it."""

    error_type = "network"

    def __init__(
        self, message: str, *, status_code: int | None = None, error_type: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        if error_type is not None:
            self.error_type = error_type


class FetchTimeout(FetchError):
    error_type = "timeout"


class NetworkError(FetchError):
    error_type = "network"


class ProxyError(FetchError):
    """The proxy refused or broke the connection; counts against the proxy, not the site."""

    error_type = "proxy"


class HTTPStatusError(FetchError):
    """The site answered with a status that is not a page (4xx/5xx/429)."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> None:
        # Headers (``Retry-After``) and the start of the body (block markers) of the answer.
        self.headers = headers or {}
        self.body = body
        if status_code == 429:
            kind = "rate_limited"
        elif status_code >= 500:
            kind = "http_5xx"
        else:
            kind = "http_4xx"
        super().__init__(message, status_code=status_code, error_type=kind)


class TooLarge(FetchError):
    error_type = "too_large"


class EgressDenied(FetchError):
    """The target resolves to an address Forager may not connect to; no connection was made."""

    error_type = "egress_denied"


class PageStoreError(ForagerError):
    """The page store failed to write or read a page."""


class ParseError(ForagerError):
    """The page could not be turned into a product record."""

    error_type = "parse"


class CaptchaPage(ParseError):
    """The site answered with a robot check (CAPTCHA) instead of the page."""

    error_type = "captcha"


class BlockedPage(ParseError):
    """The site answered with an access-denied or block page."""

    error_type = "blocked"


class NotProductPage(ParseError):
    """A real page that is not a product page (search results, error page, home page)."""

    error_type = "parse"
