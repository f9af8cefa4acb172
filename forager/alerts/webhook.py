"""Sending one webhook: the body signed with HMAC-SHA256, to an address the egress policy allows.

Headers: ``X-Forager-Event``, ``X-Forager-Delivery`` (the delivery id: receivers de-duplicate
retries by it), ``X-Forager-Timestamp`` (Unix seconds) and ``X-Forager-Signature:
sha256=<hex>``, the HMAC-SHA256 of ``"<timestamp>.<body>"`` under the rule's secret. A receiver
recomputes it and refuses a timestamp too far from its clock (replays).

The target's host is resolved once and checked with ``FORAGER_PRIVATE_TARGETS`` (the operator
entered the URL, so it counts as the submitted host: ``submitted`` and ``all`` allow a private
address, ``none`` refuses it; link-local and metadata addresses are always refused); the
request then goes to that checked address, so DNS cannot answer differently in between.

A try is bounded whatever the receiver does: one deadline (``seconds``, shorter than the
delivery's lease) covers resolving, connecting, sending and the reply, and of the reply only
the status line and headers are read (httpx refuses a header block over 16 KB), never the
body. A receiver that trickles or answers without end is a failed try, over before another
process could claim the delivery.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forager.errors import EgressDenied, NetworkError
from forager.fetch.egress import EgressPolicy, Resolver

if TYPE_CHECKING:  # imported where a webhook is sent: a crawl sends none
    import httpx

SIGNATURE_HEADER = "X-Forager-Signature"
TIMESTAMP_HEADER = "X-Forager-Timestamp"
_ERROR_CHARS = 500


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` over ``timestamp.body``: what ``X-Forager-Signature`` carries."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


@dataclass(frozen=True, slots=True)
class Outcome:
    """One try: the receiver's status code, or why there was none; ``ok`` when 2xx."""

    status_code: int | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def body_of(payload: dict[str, Any], delivery_id: int) -> bytes:
    return json.dumps({**payload, "delivery_id": delivery_id}, separators=(",", ":")).encode()


async def post(
    client: httpx.AsyncClient,
    resolver: Resolver,
    *,
    url: str,
    secret: str | None,
    event: str,
    delivery_id: int,
    payload: dict[str, Any],
    private_targets: str,
    seconds: float,
) -> Outcome:
    """POST ``payload`` to ``url``, signed, within ``seconds`` in all (resolving, connecting,
    sending and the reply's head); never raises for the receiver's or network's faults."""
    import httpx

    target = httpx.URL(url)
    body = body_of(payload, delivery_id)
    stamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Forager-Webhook",
        "X-Forager-Event": event,
        "X-Forager-Delivery": str(delivery_id),
        TIMESTAMP_HEADER: stamp,
        "Host": target.netloc.decode("ascii"),
    }
    if secret is not None:
        headers[SIGNATURE_HEADER] = signature(secret, stamp, body)
    try:
        async with asyncio.timeout(seconds):
            try:
                policy = EgressPolicy(private_targets, target.host)
                address = await resolver.connect_address(policy, target.host)
            except (EgressDenied, NetworkError) as exc:
                return Outcome(None, str(exc)[:_ERROR_CHARS])
            pinned = target.copy_with(host=str(address))
            extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
            request = client.build_request(
                "POST",
                pinned,
                content=body,
                headers=headers,
                timeout=seconds,
                extensions=extensions,
            )
            # Streamed so the body is never read: closing the response drops the connection.
            response = await client.send(request, stream=True)
            await response.aclose()
    except (TimeoutError, httpx.TimeoutException):
        return Outcome(None, f"no answer within {seconds:g} s")
    except httpx.HTTPError as exc:
        return Outcome(None, (f"{type(exc).__name__}: {exc}")[:_ERROR_CHARS])
    error = None if response.is_success else f"the receiver answered {response.status_code}"
    return Outcome(response.status_code, error)
