"""One agent connection as the hub sees it, and the WebSocket side of meeting it: the hello
(version, validation, token) and closing with a code and reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketState

from forager.agents import protocol
from forager.agents.admin import A
from forager.agents.body import BodyReceiver
from forager.agents.protocol import Hello
from forager.domains.sticky_sessions import Lease
from forager.queue.door import ClaimedTask
from forager.worker.claiming import ClaimLoop
from forager.worker.pipeline import Pipeline

# What one agent connection may cost the server, whatever it sends (issue 11):
# task ids whose late frames are dropped, remembered up to this many per connection;
IGNORED_MAX = 256
# returned tasks allowed per window beyond its concurrency before it gets no work for a window.
RETURN_WINDOW_SECONDS = 60.0


@dataclass(eq=False)
class Assigned:
    """A task handed to the agent: when, whether its gate opened, its body as it arrives."""

    task: ClaimedTask
    started: datetime
    gate_opened: bool = False
    body: BodyReceiver | None = None
    settling: bool = False
    sticky: Lease | None = None  # the sticky session its fetch goes through (issue 33)


@dataclass(eq=False)
class Connection:
    """One live agent connection, as the hub sees it."""

    ws: WebSocket
    agent_id: int
    name: str
    token_hash: str
    owner: str
    capacity: int
    domains: list[str] | None
    fetchers: list[str]
    pipeline: Pipeline
    status: str = A.CONNECTED
    last_heartbeat: float = field(default_factory=time.monotonic)
    in_flight: dict[int, Assigned] = field(default_factory=dict)
    # Task ids whose remaining body frames are to be dropped (refused or timed-out results),
    # at most IGNORED_MAX: the oldest is forgotten first.
    ignored: dict[int, None] = field(default_factory=dict)
    unknown: int = 0  # messages about tasks this connection does not hold
    returns: list[float] = field(default_factory=list)  # when it returned tasks, this window
    quiet_until: float = 0.0  # returned too many: no new tasks until then
    draining: bool = False
    dropped: bool = False
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Its claim loop (``agents.dispatch``) and the task running it.
    claiming: ClaimLoop | None = None
    feeder: asyncio.Task[None] | None = None
    # Serializes busy/connected flips with task hand-outs, so the stored status stays true.
    status_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def free(self) -> int:
        if self.dropped or self.draining or self.status == A.BLOCKED:
            return 0
        if time.monotonic() < self.quiet_until:
            return 0
        return self.capacity - len(self.in_flight)

    def ignore(self, task_id: int) -> None:
        """Drop the rest of this task's frames (bounded: the oldest id is forgotten)."""
        self.ignored.pop(task_id, None)
        self.ignored[task_id] = None
        if len(self.ignored) > IGNORED_MAX:
            del self.ignored[next(iter(self.ignored))]

    def returned(self) -> bool:
        """Count a returned task; True when this window's returns exceed its concurrency
        (a claim-and-return loop): it then gets no work for a window."""
        now = time.monotonic()
        self.returns = [t for t in self.returns if now - t < RETURN_WINDOW_SECONDS]
        self.returns.append(now)
        if len(self.returns) <= self.capacity:
            return False
        self.quiet_until = now + RETURN_WINDOW_SECONDS
        return True

    def wake(self) -> None:
        if self.claiming is not None:
            self.claiming.wake()

    async def send(self, kind: str, **fields: Any) -> None:
        if self.dropped:
            return
        async with self.send_lock:
            with contextlib.suppress(Exception):  # a broken connection is noticed by the reader
                await self.ws.send_text(json.dumps(protocol.message(kind, **fields)))


async def read_hello(ws: WebSocket) -> tuple[Hello, str | None] | None:
    """The agent's hello and its token (in the message or an ``Authorization`` header); None
    after closing the socket with the reason when the hello is late, not JSON or not valid."""
    try:
        async with asyncio.timeout(protocol.HELLO_SECONDS):
            raw = await ws.receive_text()
        data = json.loads(raw)
    except TimeoutError:
        await close(ws, protocol.CLOSE_TIMEOUT, "no hello message in time")
        return None
    except Exception:
        await close(ws, protocol.CLOSE_PROTOCOL, "the first message must be a JSON hello")
        return None
    if not isinstance(data, dict) or data.get("type") != "hello":
        await close(ws, protocol.CLOSE_PROTOCOL, "the first message must be a JSON hello")
        return None
    if data.get("v") != protocol.VERSION:
        await close(
            ws,
            protocol.CLOSE_PROTOCOL,
            f"unsupported protocol version {str(data.get('v'))[:10]!r}; "
            f"this server speaks {protocol.VERSION}",
        )
        return None
    try:
        hello = Hello.model_validate(data)
    except ValidationError as exc:
        await close(ws, protocol.CLOSE_PROTOCOL, validation_reason(exc))
        return None
    return hello, hello.token or _bearer(ws.headers.get("authorization", ""))


def _bearer(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def validation_reason(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "message"
    return f"{where}: {first['msg']}"[:120]


async def close(ws: WebSocket, code: int, reason: str) -> None:
    if ws.client_state == WebSocketState.DISCONNECTED or ws.application_state == (
        WebSocketState.DISCONNECTED
    ):
        return
    with contextlib.suppress(Exception):
        await ws.close(code=code, reason=reason[:120])
