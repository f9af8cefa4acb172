"""``Authorization: Bearer <key>`` on every ``/api`` route; read keys may only read."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from forager.api.deps import RuntimeDep
from forager.apikeys import authenticate
from forager.db.models import ApiKey
from forager.errors import Forbidden, Unauthorized

_bearer = HTTPBearer(auto_error=False, description="An API key from `forager apikey create`.")
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def require_key(
    request: Request,
    runtime: RuntimeDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiKey:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("this endpoint needs an API key: send 'Authorization: Bearer <key>'")
    key = await authenticate(runtime.db, credentials.credentials)
    if key is None:
        raise Unauthorized("the API key is not valid (unknown or revoked)")
    if key.role != "admin" and request.method not in _READ_METHODS:
        raise Forbidden(f"the API key {key.name!r} is read-only; this action needs an admin key")
    return key


ApiKeyDep = Annotated[ApiKey, Depends(require_key)]
