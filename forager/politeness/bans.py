"""Ban signals: answers that say the site refused *this client*, not that the page is gone.

A ban rotates to another proxy for the retry and counts against the proxy for that domain
only (``domain_proxies``), not against the proxy everywhere: another site may still
welcome it. Signals: 429; 403 or 503 whose body is a block / robot-check page; a CAPTCHA
page served with 200; a connection reset through a proxy.
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime

from forager.db.types import utcnow
from forager.errors import FetchError, HTTPStatusError, ProxyError
from forager.fetch.base import FetchResponse
from forager.parse.classify import classify


def page_ban(response: FetchResponse) -> tuple[str, str] | None:
    """(error_type, message) when a 2xx/3xx answer is a robot check or block page."""
    found = classify(response.text)
    if found is None:
        return None
    kind, what = found
    return kind, f"{response.url} returned {what} (status {response.status_code})"


def classify_error(exc: FetchError) -> bool:
    """True when ``exc`` is a ban signal; a 403/503 block page becomes ``blocked`` (retryable)."""
    if isinstance(exc, HTTPStatusError):
        if exc.status_code == 429:
            return True
        if exc.status_code in (403, 503) and exc.body:
            found = classify(exc.body.decode("utf-8", errors="replace"))
            if found is not None:
                exc.error_type = found[0]
                exc.message = f"{exc.message}: {found[1]}"
                exc.args = (exc.message,)
                return True
        return False
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


def retry_after_seconds(headers: dict[str, str], cap: float) -> float | None:
    """``Retry-After`` in seconds (delta or HTTP date), capped at ``cap``; None if absent/bad."""
    value = headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return min(float(value), cap)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, min((when - utcnow()).total_seconds(), cap))
