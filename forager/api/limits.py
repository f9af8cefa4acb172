"""Guards at the edge: oversized bodies get 413, NUL characters 422, before any handler runs.

PostgreSQL cannot store NUL in text, and no URL, name or search needs one: refusing them
here gives one clear error instead of a database error deep in a handler.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_NUL = "NUL characters are not accepted in any field"
_NUL_ESCAPE = b"\\u0000"  # how JSON writes a NUL


class BodyLimit:
    """Pure ASGI middleware: checks Content-Length up front; reads chunked bodies to the limit."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send, 413, "Request too large", self._too_large)
            return
        query = scope.get("query_string", b"").lower()
        if b"%00" in query or b"\x00" in query:
            await self._refuse(send, 422, "Invalid request", _NUL)
            return
        if scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        # Read the body here, up to the limit, then hand it on.
        messages: list[Message] = []
        seen = 0
        tail = b""  # the end of the previous chunk: a NUL escape may straddle two chunks
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await self._refuse(send, 413, "Request too large", self._too_large)
                return
            if b"\x00" in chunk or _NUL_ESCAPE in tail + chunk:
                await self._refuse(send, 422, "Invalid request", _NUL)
                return
            tail = (tail + chunk)[-(len(_NUL_ESCAPE) - 1) :]
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    @property
    def _too_large(self) -> str:
        return f"the request body exceeds {self.max_bytes} bytes"

    @staticmethod
    async def _refuse(send: Send, status: int, title: str, detail: str) -> None:
        problem = {"type": "about:blank", "title": title, "status": status, "detail": detail}
        body = json.dumps(problem).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/problem+json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
