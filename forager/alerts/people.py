"""Alerts to people (e-mail, Slack, Telegram, Discord …) through Apprise.

An Apprise URL carries its service's credentials, so it is stored encrypted like a webhook's
secret, shown back only masked (``mask``), and never logged: what Apprise reports about a
failed send is kept only with every part of the URL that could be a secret blotted out.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any
from urllib.parse import unquote, urlsplit

from forager.alerts.webhook import Outcome

_TITLES = {
    "price_drop": "Price dropped",
    "price_rise": "Price rose",
    "price_below": "Price below threshold",
    "price_above": "Price above threshold",
    "back_in_stock": "Back in stock",
    "out_of_stock": "Out of stock",
    "task_failed": "Task failed",
    "breaker_opened": "Domain circuit breaker opened",
    "agent_blocked": "Agent blocked",
    "mission_finished": "Mission finished",
    "mission_failed": "Mission failed",
}
_ERROR_CHARS = 500


def valid(url: str) -> bool:
    """Does Apprise know this URL's service and accept its form?"""
    import apprise  # 0.05-0.1 s to import: only where alerts go to people, not every start

    return apprise.Apprise.instantiate(url, suppress_exceptions=True) is not None


def mask(url: str) -> str:
    """``scheme://host/…``: what a list may show of an Apprise (or webhook) URL."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}/…" if host else f"{parts.scheme}://…"


def _secrets(url: str) -> list[str]:
    """Every piece of ``url`` that may be a credential (user, password, path, query values)."""
    parts = urlsplit(url)
    pieces = [url, parts.username or "", parts.password or "", parts.path.strip("/")]
    pieces += re.split(r"[/&=?]", parts.path + "&" + parts.query)
    return sorted(
        {p for p in pieces if len(p) >= 4} | {unquote(p) for p in pieces if len(p) >= 4},
        key=len,
        reverse=True,
    )


def scrub(text: str, url: str) -> str:
    for piece in _secrets(url):
        text = text.replace(piece, "***")
    return text


def message(payload: dict[str, Any]) -> tuple[str, str]:
    """A short title and body for people, from a delivery's payload."""
    event = str(payload.get("event", ""))
    title = _TITLES.get(event, event)
    product = payload.get("product")
    if isinstance(product, dict):
        name = product.get("name") or product.get("url")
        price = product.get("price")
        currency = product.get("currency") or ""
        line = f"{name}: {price} {currency}".strip()
        if product.get("previous_price") is not None:
            line += f" (was {product['previous_price']}"
            if product.get("change_percent") is not None:
                line += f", {product['change_percent']:+}%"
            line += ")"
        if product.get("is_available") is not None:
            line += "; in stock" if product["is_available"] else "; out of stock"
        return f"{title}: {name}", f"{line}\n{product.get('url', '')}"
    subject = {k: v for k, v in payload.items() if k not in ("event", "rule", "occurred_at")}
    details = "; ".join(
        f"{k} {v}" for body in subject.values() if isinstance(body, dict) for k, v in body.items()
    )
    rule = payload.get("rule") or {}
    return title, f"{details}\nRule: {rule.get('name', '')}"


async def notify(url: str, payload: dict[str, Any], *, seconds: float) -> Outcome:
    """Send ``payload`` through Apprise; never raises for the service's faults."""
    import apprise

    sender = apprise.Apprise()
    if not sender.add(url):
        return Outcome(None, "Apprise does not accept this URL")
    title, body = message(payload)
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as captured:  # type: ignore[no-untyped-call]
        try:
            sent = await asyncio.wait_for(sender.async_notify(body=body, title=title), seconds)
        except TimeoutError:
            return Outcome(None, f"no answer within {seconds:g} s")
        log_text = captured.getvalue()
    if sent:
        return Outcome(200, None)
    lines = [line for line in log_text.strip().splitlines() if line.strip()]
    why = scrub(lines[-1] if lines else "the service refused the notification", url)
    return Outcome(None, why[:_ERROR_CHARS])
