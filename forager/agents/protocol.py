"""The agent protocol (docs/AGENT_PROTOCOL.md): JSON messages with a version, binary body chunks.

Shared by the hub (server) and the agent program, so both sides agree on names, limits
and close codes. Only the server validates with pydantic: an agent is untrusted input.
"""

from __future__ import annotations

import struct
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

VERSION = 1
PATH = "/agents/ws"
# A response body travels as gzip in binary frames of at most CHUNK_BYTES, each prefixed with
# the task id; no WebSocket message may exceed MAX_MESSAGE_BYTES, so nothing big is buffered.
CHUNK_BYTES = 64 * 1024
MAX_MESSAGE_BYTES = 256 * 1024
# With a failed ``result`` for an HTTP error answer, at most this much of the start of its body
# follows (the same the local fetcher keeps): enough to tell a block page (politeness/bans.py).
ERROR_BODY_BYTES = 64 * 1024
_TASK_ID = struct.Struct(">Q")
# At most this many cookies come back with a result (a session's jar, not a cookie store).
MAX_COOKIES = 100
# How long a new connection may take to say hello.
HELLO_SECONDS = 10.0

# Close codes (4000–4999 are the application's).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_RESTART = 1012
CLOSE_PROTOCOL = 4400  # a malformed or unexpected message, or a version the server does not speak
CLOSE_UNAUTHORIZED = 4401  # unknown, revoked or rotated token — nothing more is said
CLOSE_TIMEOUT = 4408  # no hello in time, or heartbeats stopped
CLOSE_REPLACED = 4409  # the same agent connected again; the older connection is closed
# Codes after which reconnecting cannot help: the agent program exits.
FATAL_CLOSE_CODES = frozenset({CLOSE_PROTOCOL, CLOSE_UNAUTHORIZED, CLOSE_REPLACED})


def ws_url(server: str) -> str:
    """``http(s)://host:port[/prefix]`` → ``ws(s)://host:port[/prefix]/agents/ws``."""
    parts = urlsplit(server.strip())
    schemes = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}
    if parts.scheme not in schemes or not parts.hostname:
        raise ValueError(f"the server URL must be http(s)://host[:port], got {server!r}")
    path = parts.path.rstrip("/") + PATH
    return urlunsplit((schemes[parts.scheme], parts.netloc, path, "", ""))


def frame(task_id: int, data: bytes) -> bytes:
    return _TASK_ID.pack(task_id) + data


def unframe(data: bytes) -> tuple[int, bytes]:
    if len(data) < _TASK_ID.size:
        raise ValueError("a binary frame starts with an 8-byte task id")
    return _TASK_ID.unpack_from(data)[0], data[_TASK_ID.size :]


def message(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "v": VERSION, **fields}


# -- messages from agents (validated by the server) ------------------------------------------


class _Msg(BaseModel):
    model_config = ConfigDict(extra="ignore")

    v: int


class Capabilities(BaseModel):
    model_config = ConfigDict(extra="ignore")

    concurrency: int = Field(1, ge=1, le=64)
    fetchers: list[str] = Field(default_factory=lambda: ["http"], max_length=10)
    compression: list[str] = Field(default_factory=lambda: ["gzip"], max_length=10)
    allow_domains: list[Annotated[str, Field(max_length=255)]] | None = Field(None, max_length=1000)


class Hello(_Msg):
    type: Literal["hello"]
    token: str | None = Field(None, max_length=200)
    agent_version: str = Field(max_length=50)
    capabilities: Capabilities = Field(default_factory=Capabilities)


class Heartbeat(_Msg):
    type: Literal["heartbeat"]
    external_ip: str | None = Field(None, max_length=45)
    isp: str | None = Field(None, max_length=100)


class Sent(_Msg):
    type: Literal["sent"]
    task_id: int


class Result(_Msg):
    """The outcome of one fetch; with ``ok`` the gzip body follows in binary frames.

    Without ``ok``, an HTTP error answer (``status_code`` ≥ 400) may carry its ``headers``
    and, when ``body_bytes`` > 0, the start of its body (≤ ``ERROR_BODY_BYTES``) the same way,
    so the server can tell a block page from a plain error. Older agents send neither.
    """

    type: Literal["result"]
    task_id: int
    ok: bool
    status_code: int | None = Field(None, ge=100, le=599)
    final_url: str | None = Field(None, max_length=8192)
    headers: dict[Annotated[str, Field(max_length=200)], Annotated[str, Field(max_length=8192)]] = (
        Field(default_factory=dict, max_length=200)
    )
    elapsed_ms: int = Field(0, ge=0)
    body_bytes: int = Field(0, ge=0, description="Uncompressed size of the body.")
    encoding: Literal["gzip"] = "gzip"
    error_type: str | None = Field(None, max_length=50)
    message: str | None = Field(None, max_length=2000)
    # The cookies the site set during the fetch (its warm-up included): kept in the task's
    # sticky session (issue 33). Older agents send none.
    cookies: dict[Annotated[str, Field(max_length=200)], Annotated[str, Field(max_length=4096)]] = (
        Field(default_factory=dict, max_length=MAX_COOKIES)
    )


class BodyEnd(_Msg):
    type: Literal["body_end"]
    task_id: int


class Return(_Msg):
    """The agent gives a task back unfetched (not on its allow-list, shutting down)."""

    type: Literal["return"]
    task_id: int
    reason: str = Field("", max_length=200)


class Goodbye(_Msg):
    """The agent is shutting down: no more tasks; it finishes or returns what it holds."""

    type: Literal["goodbye"]


AgentMessage = Annotated[
    Heartbeat | Sent | Result | BodyEnd | Return | Goodbye | Hello, Field(discriminator="type")
]
