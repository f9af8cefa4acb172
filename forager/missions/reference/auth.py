"""The ``x-api-key`` check both reference services require (constant-time comparison)."""

from __future__ import annotations

import hmac

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = frozenset({"/health"})


class ApiKeyGuard:
    """Pure ASGI middleware: 401 unless ``x-api-key`` matches (``open`` paths excepted)."""

    def __init__(self, app: ASGIApp, key: str, open_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.key = key.encode()
        self.open_prefixes = open_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or path.startswith(self.open_prefixes):
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-api-key", b"")
        if not hmac.compare_digest(given, self.key):
            answer = JSONResponse({"detail": "missing or wrong x-api-key"}, status_code=401)
            await answer(scope, receive, send)
            return
        await self.app(scope, receive, send)


def protect(app: FastAPI, key: str, *open_prefixes: str) -> None:
    """Require the key on every route of ``app`` but /health and ``open_prefixes``."""
    app.add_middleware(ApiKeyGuard, key=key, open_prefixes=open_prefixes)
