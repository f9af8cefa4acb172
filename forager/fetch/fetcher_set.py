"""The fetchers a worker pool owns, chosen per request by the domain's ``fetcher`` setting.

``FetcherSet`` is itself a ``Fetcher``: ``fetch`` hands the request to the fetcher named by
``request.fetcher`` (built on first use, so a pool whose domains never ask for the browser
never starts Chromium), and ``aclose`` closes every fetcher it built.
"""

from __future__ import annotations

from forager.config import Settings
from forager.errors import FetchError
from forager.fetch.base import Fetcher, FetchRequest, FetchResponse

FETCHER_KINDS = ("http", "impersonate", "browser")
# A domain's ``fetcher`` may also be ``auto``: the worker picks one of FETCHER_KINDS per fetch,
# cheapest first (``forager.worker.escalation``); a request always names a real one.
AUTO = "auto"
DOMAIN_FETCHERS = (*FETCHER_KINDS, AUTO)


def current(fetcher: str, rung: str | None = None) -> str:
    """The fetcher a domain using ``fetcher`` fetches with now: for ``auto`` the remembered
    ``rung`` (None: http, the cheapest)."""
    return (rung or "http") if fetcher == AUTO else fetcher


def for_files(fetcher: str, rung: str | None = None) -> str:
    """The fetcher for what is not a page (robots.txt, an image) of a domain using ``fetcher``:
    no browser (its TLS fingerprint through ``impersonate``), and for ``auto`` the remembered
    ``rung`` (None: http)."""
    kind = current(fetcher, rung)
    return "impersonate" if kind == "browser" else kind


def build_fetcher(kind: str, settings: Settings) -> Fetcher:
    """A new fetcher of ``kind`` (one of ``FETCHER_KINDS``)."""
    if kind == "http":
        from forager.fetch.http import HttpFetcher

        return HttpFetcher(settings)
    if kind == "impersonate":
        from forager.fetch.impersonate import ImpersonateFetcher

        return ImpersonateFetcher(settings)
    if kind == "browser":
        from forager.fetch.browser import BrowserFetcher

        return BrowserFetcher(settings)
    raise FetchError(
        f"unknown fetcher {kind!r} (known: {', '.join(FETCHER_KINDS)})", error_type="internal"
    )


class FetcherSet:
    """One fetcher of each kind, built when first needed; ``overrides`` replace built ones."""

    def __init__(self, settings: Settings, overrides: dict[str, Fetcher] | None = None) -> None:
        self.settings = settings
        self._fetchers: dict[str, Fetcher] = dict(overrides or {})

    def get(self, kind: str) -> Fetcher:
        fetcher = self._fetchers.get(kind)
        if fetcher is None:
            fetcher = self._fetchers[kind] = build_fetcher(kind, self.settings)
        return fetcher

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        return await self.get(request.fetcher).fetch(request)

    async def aclose(self) -> None:
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        for fetcher in fetchers:
            await fetcher.aclose()
