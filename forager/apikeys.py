"""API keys: generated server-side, shown once, stored only as a SHA-256 hash.

Keys carry 256 random bits, so a plain SHA-256 is enough to make the stored hash useless
to a reader of the database (no password-style slow hash is needed for such entropy).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta

from sqlalchemy import select, update

from forager.db import audit
from forager.db.engine import Database
from forager.db.models import ApiKey
from forager.db.types import utcnow
from forager.errors import Conflict, InvalidRequest, NotFound

ROLES = ("admin", "read")
PREFIX = "fgr_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}$")
# last_used_at is refreshed at most this often, so reads do not each cost a write.
_TOUCH_EVERY = timedelta(minutes=1)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def create_key(db: Database, name: str, role: str) -> tuple[ApiKey, str]:
    """A new key for ``name``; the plain key is returned here and never again."""
    if not _NAME.match(name):
        raise InvalidRequest(
            "name must be 1–100 letters, digits, spaces, dots, hyphens or underscores",
            field="name",
        )
    if role not in ROLES:
        raise InvalidRequest(f"role must be one of {', '.join(ROLES)}", field="role")
    key = PREFIX + secrets.token_urlsafe(32)
    async with db.session() as session:
        taken = await session.scalar(
            select(ApiKey.id).where(ApiKey.name == name, ApiKey.revoked_at.is_(None))
        )
        if taken is not None:
            raise Conflict(f"an active API key named {name!r} exists; revoke it first")
        row = ApiKey(name=name, role=role, key_hash=hash_key(key), key_prefix=key[:8])
        session.add(row)
        await session.flush()
        audit.record(session, "api_key", [row.id], "created", {"name": name, "role": role})
    return row, key


async def authenticate(db: Database, key: str) -> ApiKey | None:
    """The active key matching ``key``, or None."""
    digest = hash_key(key)
    async with db.reader() as session:
        row = await session.scalar(
            select(ApiKey).where(ApiKey.key_hash == digest, ApiKey.revoked_at.is_(None))
        )
    if row is None or not hmac.compare_digest(row.key_hash, digest):
        return None
    now = utcnow()
    if row.last_used_at is None or now - row.last_used_at > _TOUCH_EVERY:
        async with db.session() as session:
            await session.execute(
                update(ApiKey).where(ApiKey.id == row.id).values(last_used_at=now)
            )
    return row


async def list_keys(db: Database) -> list[ApiKey]:
    async with db.reader() as session:
        return list(await session.scalars(select(ApiKey).order_by(ApiKey.id)))


async def revoke_key(db: Database, name: str) -> ApiKey:
    """Revoke the active key called ``name``; it stops working at once."""
    async with db.session() as session:
        row = await session.scalar(
            select(ApiKey).where(ApiKey.name == name, ApiKey.revoked_at.is_(None))
        )
        if row is None:
            raise NotFound(f"no active API key named {name!r}")
        row.revoked_at = utcnow()
        audit.record(session, "api_key", [row.id], "revoked", {"name": name})
        return row


async def any_active_key(db: Database) -> bool:
    async with db.reader() as session:
        found = await session.scalar(select(ApiKey.id).where(ApiKey.revoked_at.is_(None)))
    return found is not None
