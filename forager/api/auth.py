"""``Authorization: Bearer <key>`` on every ``/api`` route; read keys may only read.

Without a Bearer header, the dashboard's session cookie (plus ``X-CSRF-Token`` for state
changes) authenticates instead: see ``forager.web.session``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from forager.api.deps import RuntimeDep
from forager.apikeys import authenticate
from forager.db.models import ApiKey
from forager.errors import Forbidden, Unauthorized
from forager.web.session import COOKIE as SESSION_COOKIE
from forager.web.session import session_key

_bearer = HTTPBearer(auto_error=False, description="An API key from `forager apikey create`.")
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def require_key(
    request: Request,
    runtime: RuntimeDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiKey:
    if credentials is None and SESSION_COOKIE in request.cookies:
        # The dashboard: a signed session cookie, with a CSRF token for state changes.
        session_owner, _ = await session_key(request, runtime)
        return session_owner
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("this endpoint needs an API key: send 'Authorization: Bearer <key>'")
    key = await authenticate(runtime.db, credentials.credentials)
    if key is None:
        raise Unauthorized("the API key is not valid (unknown or revoked)")
    if key.role != "admin" and request.method not in _READ_METHODS:
        raise Forbidden(f"the API key {key.name!r} is read-only; this action needs an admin key")
    return key


ApiKeyDep = Annotated[ApiKey, Depends(require_key)]
