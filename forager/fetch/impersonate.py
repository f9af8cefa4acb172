"""The ``impersonate`` fetcher: libcurl speaking with a real browser's TLS and HTTP/2 fingerprint.

Sites that refuse clients by their TLS handshake (JA3/JA4) or HTTP/2 settings see Chrome here.
Everything else is the ``http`` fetcher's (``forager.fetch.http.CurlFetcher``): redirects
followed hop by hop under the egress policy, one deadline, bodies through bounded decoders,
proxies whose credentials never reach an error text, ``on_sent`` once the headers are out.
"""

from __future__ import annotations

from forager.config import Settings
from forager.fetch.http import CurlFetcher

# The browser whose fingerprint is presented (curl_cffi's newest Chrome).
IMPERSONATE = "chrome"


class ImpersonateFetcher(CurlFetcher):
    """The ``impersonate`` fetcher (see the module docstring)."""

    def __init__(self, settings: Settings, impersonate: str = IMPERSONATE) -> None:
        super().__init__(settings, impersonate)
