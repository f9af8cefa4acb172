"""Alerts to people (e-mail, Slack, Telegram, Discord …) through Apprise.

An Apprise URL carries its service's credentials, so it is stored encrypted like a webhook's
secret, shown back only masked (``mask``), and never logged: what Apprise reports about a
failed send is kept only with every part of the URL that could be a secret blotted out.

Where an Apprise service posts to a host the operator typed (``json://``, ``xml://``,
``form://``, a self-hosted ``gotify://``, ``ntfy://``, ``mmost://`` …: any service whose URL has
a host), that host is checked with ``FORAGER_PRIVATE_TARGETS`` when the rule is saved
(``check_host``), as a webhook's is when sent: it counts as the submitted host. When sent, every
connection Apprise's HTTP makes is checked and pinned, and the send has one deadline and a reply
budget (``confine``); SMTP (``mailto://``) does not go through requests and is not confined.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any
from urllib.parse import unquote, urlsplit

from forager.alerts import confine
from forager.alerts.webhook import Outcome
from forager.errors import NetworkError
from forager.fetch.egress import EgressPolicy, Resolver

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
    "monitor_changed": "Monitor changed",
    "budget_exhausted": "Crawl job budget exhausted",
    "proxies_low": "Few active proxies",
    "failure_rate_high": "High failure rate",
    "parse_rate_low": "Parse success rate dropped",
    "monitor_stale": "Monitor stale",
    "monitor_failing": "Monitor failing",
}
_ERROR_CHARS = 500
_GRACE_SECONDS = 1.0  # after the deadline, for the worker thread to see its sockets shut


def valid(url: str) -> bool:
    """Does Apprise know this URL's service and accept its form?"""
    import apprise  # 0.05-0.1 s to import: only where alerts go to people, not every start

    return apprise.Apprise.instantiate(url, suppress_exceptions=True) is not None


def typed_host(url: str) -> str | None:
    """The host the operator typed into ``url``, when its service posts to one (None when the
    service has fixed hosts of its own, like Telegram's or Slack's)."""
    import apprise

    plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    if plugin is None or "host" not in getattr(type(plugin), "template_tokens", {}):
        return None
    host = getattr(plugin, "host", None)
    return host if isinstance(host, str) and host else None


async def check_host(resolver: Resolver, url: str, private_targets: str) -> None:
    """Raise ``EgressDenied`` when the policy refuses every address of ``url``'s typed host. A
    host that does not resolve now is left to the send, which checks it again."""
    host = typed_host(url)
    if host is None:
        return
    try:
        await resolver.connect_address(EgressPolicy(private_targets, host), host)
    except NetworkError:
        return


def mask(url: str) -> str:
    """``scheme://host:port/…``: what a list may show of an Apprise (or webhook) URL (the port
    tells two receivers on one host apart; user, password, path and query are secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host:
        return f"{parts.scheme}://…"
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # not a number: shown as nothing rather than guessed
        port = None
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}/…"


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
    if payload.get("state") == "cleared":  # an operational episode ended
        title = f"Cleared: {title}"
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
    subject = {
        k: v
        for k, v in payload.items()
        if k not in ("event", "rule", "occurred_at", "state", "since")
    }
    details = "; ".join(
        f"{k} {v}" for body in subject.values() if isinstance(body, dict) for k, v in body.items()
    )
    rule = payload.get("rule") or {}
    return title, f"{details}\nRule: {rule.get('name', '')}"


async def notify(
    url: str, payload: dict[str, Any], *, seconds: float, private_targets: str
) -> Outcome:
    """Send ``payload`` through Apprise within ``seconds``, every connection checked with
    ``private_targets`` (``url``'s typed host counting as submitted); never raises for the
    service's faults."""
    import apprise

    sender = apprise.Apprise()
    if not sender.add(url):
        return Outcome(None, "Apprise does not accept this URL")
    title, body = message(payload)
    call = confine.Call(EgressPolicy(private_targets, typed_host(url)), seconds)
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as captured:  # type: ignore[no-untyped-call]
        sending = asyncio.ensure_future(
            asyncio.to_thread(confine.run, call, lambda: sender.notify(body=body, title=title))
        )
        done, _ = await asyncio.wait({sending}, timeout=seconds)
        call.end(None if done else f"no answer within {seconds:g} s")
        if not done:  # its sockets are shut: the thread ends, and can open no other
            await asyncio.wait({sending}, timeout=_GRACE_SECONDS)
        sent = sending.done() and not sending.cancelled() and sending.exception() is None
        sent = sent and bool(sending.result())
        log_text = captured.getvalue()
    if call.why is not None:
        return Outcome(None, scrub(call.why, url)[:_ERROR_CHARS])
    if sent:
        return Outcome(200, None)
    lines = [line for line in log_text.strip().splitlines() if line.strip()]
    why = scrub(lines[-1] if lines else "the service refused the notification", url)
    return Outcome(None, why[:_ERROR_CHARS])
