"""``Authorization: Bearer <key>`` on every ``/api`` route; read keys may only read.

Without a Bearer header, the dashboard's session cookie (plus ``X-CSRF-Token`` for state
changes) authenticates instead: see ``forager.api.sessions``. The key's name becomes the actor
of every event the request records (``forager.db.audit.ACTOR``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from forager.api.deps import RuntimeDep
from forager.api.sessions import COOKIE as SESSION_COOKIE
from forager.api.sessions import session_key
from forager.apikeys import authenticate
from forager.db import audit
from forager.db.models import ApiKey
from forager.errors import Forbidden, Unauthorized

_bearer = HTTPBearer(auto_error=False, description="An API key from `forager apikey create`.")
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


async def require_key(request: Request, runtime: RuntimeDep, credentials: BearerDep) -> ApiKey:
    if credentials is None and SESSION_COOKIE in request.cookies:
        # The dashboard: a signed session cookie, with a CSRF token for state changes.
        session_owner, _ = await session_key(request, runtime)
        audit.ACTOR.set(session_owner.name)
        return session_owner
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("this endpoint needs an API key: send 'Authorization: Bearer <key>'")
    key = await authenticate(runtime.db, credentials.credentials)
    if key is None:
        raise Unauthorized("the API key is not valid (unknown or revoked)")
    if key.role != "admin" and request.method not in _READ_METHODS:
        raise Forbidden(f"the API key {key.name!r} is read-only; this action needs an admin key")
    audit.ACTOR.set(key.name)
    return key


async def optional_key(
    request: Request, runtime: RuntimeDep, credentials: BearerDep
) -> ApiKey | None:
    """The caller's valid API key (Bearer or dashboard session), or None: for open routes
    that show more to a known caller."""
    try:
        return await require_key(request, runtime, credentials)
    except (Unauthorized, Forbidden):
        return None


ApiKeyDep = Annotated[ApiKey, Depends(require_key)]
OptionalKeyDep = Annotated[ApiKey | None, Depends(optional_key)]


class ActorScope:
    """Pure ASGI middleware: each request starts with no actor and leaves none behind, so the
    key named by ``require_key`` never outlives its request (in-process clients share a task)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = audit.ACTOR.set(None)
        try:
            await self.app(scope, receive, send)
        finally:
            audit.ACTOR.reset(token)
