"""Ban signals: answers that say the site refused *this client*, not that the page is gone.

A ban rotates to another proxy for the retry and counts against the proxy for that domain
only (``domain_proxies``), not against the proxy everywhere: another site may still
welcome it. Which types are bans is their ``proxy_verdict`` in ``forager.errors.EFFECTS``
(429, a block or robot-check page); this module adds what the type alone cannot say: a
403/503 whose body is a block page is re-typed ``blocked`` / ``captcha``, and a connection
reset through a proxy (a ``proxy`` error) is a ban as well.
"""

from __future__ import annotations

from forager.errors import FetchError, HTTPStatusError, ProxyError, effect
from forager.parse.classify import classify

# Statuses a site answers a refused client with, besides 429, when the body says so.
_BLOCK_PAGE_STATUSES = frozenset({403, 503})


def classify_error(exc: FetchError) -> bool:
    """True when ``exc`` is a ban signal; a 403/503 block page is re-typed first (retryable)."""
    if isinstance(exc, HTTPStatusError) and exc.status_code in _BLOCK_PAGE_STATUSES and exc.body:
        found = classify(exc.body.decode("utf-8", errors="replace"))
        if found is not None:
            exc.error_type = found[0]
            exc.message = f"{exc.message}: {found[1]}"
            exc.args = (exc.message,)
    if effect(exc.error_type).proxy_verdict == "ban":
        return True
    return isinstance(exc, ProxyError) and is_connection_reset(exc)


def is_connection_reset(exc: FetchError) -> bool:
    """A proxy connection cut mid-exchange (the site dropping this exit IP)."""
    seen: BaseException | None = exc
    for _ in range(8):  # the FetchError wraps httpx's, which wraps httpcore's, which wraps the OS's
        if seen is None:
            break
        if isinstance(seen, ConnectionResetError) or "reset" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False
