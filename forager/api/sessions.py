"""Dashboard sessions: a signed cookie naming an API key, and the CSRF token that goes with it.

The cookie holds ``<key id>.<expiry>.<nonce>.<signature>``: never the key itself. The
signature is an HMAC under a key derived from the server's secret key, so a session survives a
restart but cannot be forged. Each request re-reads the API key row, so revoking the key (or a
role change) ends its sessions at once. Logging out stores the session's nonce in
``dashboard_logouts`` until the session would have expired, so a logout survives a restart and
holds on every server process.

State changes made with the cookie need ``X-CSRF-Token``: an HMAC of the session's nonce, which
a page from another site can neither read nor compute. Requests with ``Authorization: Bearer``
never look at the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from fastapi import Request
from sqlalchemy import delete, select

from forager.api.deps import Runtime
from forager.crypto import derive_key
from forager.db.dialect import insert_ignoring_conflicts
from forager.db.models import ApiKey, DashboardLogout
from forager.db.types import utcnow
from forager.errors import Forbidden, Unauthorized

COOKIE = "forager_session"
CSRF_HEADER = "X-CSRF-Token"
LIFETIME_SECONDS = 12 * 3600
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Session:
    key_id: int
    expires: int
    nonce: str


class SessionSigner:
    """Signs and checks session cookies and CSRF tokens."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, message: str) -> str:
        return hmac.new(self._secret, message.encode(), hashlib.sha256).hexdigest()

    def issue(self, key_id: int) -> tuple[str, Session]:
        session = Session(key_id, int(time.time()) + LIFETIME_SECONDS, secrets.token_urlsafe(18))
        body = f"{session.key_id}.{session.expires}.{session.nonce}"
        return f"{body}.{self._mac('session.' + body)}", session

    def read(self, cookie: str) -> Session | None:
        """The session in ``cookie`` when it is genuine and unexpired (logouts: see
        ``session_key``)."""
        parts = cookie.split(".")
        if len(parts) != 4:
            return None
        key_id, expires, nonce, signature = parts
        expected = self._mac(f"session.{key_id}.{expires}.{nonce}")
        if not hmac.compare_digest(expected, signature):
            return None
        if not (key_id.isdigit() and expires.isdigit()) or int(expires) < time.time():
            return None
        return Session(int(key_id), int(expires), nonce)

    def csrf_token(self, session: Session) -> str:
        return self._mac("csrf." + session.nonce)

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(self.csrf_token(session), token)


async def log_out(runtime: Runtime, session: Session) -> None:
    """Refuse ``session`` from now on, on every process and after restarts."""
    now = utcnow()
    async with runtime.db.session() as db_session:
        await db_session.execute(delete(DashboardLogout).where(DashboardLogout.expires_at < now))
        insert = insert_ignoring_conflicts(db_session, DashboardLogout.__table__, on=["nonce"])
        expires = datetime.fromtimestamp(session.expires, UTC)
        await db_session.execute(insert.values(nonce=session.nonce, expires_at=expires))


def signer(runtime: Runtime) -> SessionSigner:
    """The app's signer, created on first use (the secret key is loaded then)."""
    found: SessionSigner | None = getattr(runtime, "_session_signer", None)
    if found is None:
        found = SessionSigner(derive_key(runtime.settings, "dashboard-session"))
        runtime._session_signer = found  # type: ignore[attr-defined]
    return found


async def session_key(
    request: Request, runtime: Runtime, *, any_role: bool = False
) -> tuple[ApiKey, Session]:
    """The API key behind the request's session cookie; CSRF-checked for state changes,
    which also need an admin key unless ``any_role`` (logging out)."""
    sessions = signer(runtime)
    session = sessions.read(request.cookies.get(COOKIE, ""))
    if session is None:
        raise Unauthorized("the dashboard session is not valid (expired or logged out)")
    async with runtime.db.reader() as db_session:
        key = await db_session.scalar(
            select(ApiKey).where(ApiKey.id == session.key_id, ApiKey.revoked_at.is_(None))
        )
        logged_out = await db_session.get(DashboardLogout, session.nonce)
    if logged_out is not None:
        raise Unauthorized("the dashboard session is not valid (expired or logged out)")
    if key is None:
        raise Unauthorized("the API key of this session was revoked")
    if request.method not in _READ_METHODS:
        if not sessions.csrf_ok(session, request.headers.get(CSRF_HEADER)):
            raise Forbidden(f"missing or wrong {CSRF_HEADER} header (CSRF protection)")
        if key.role != "admin" and not any_role:
            raise Forbidden(
                f"the API key {key.name!r} is read-only; this action needs an admin key"
            )
    return key, session
