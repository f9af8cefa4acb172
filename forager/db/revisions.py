"""Whether a database is at the newest migration, without importing Alembic.

Every process that opens a database (``serve``, ``worker``, each CLI command) migrates it first;
Alembic's import and its reading of every migration script cost ~0.2 s of CPU even when there is
nothing to do. One query answers the common case; anything else goes to Alembic.
"""

from __future__ import annotations

import functools
import re

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from forager.db.engine import Database
from forager.db.template import MIGRATIONS

_REVISION = re.compile(r"""^revision\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_DOWN_REVISION = re.compile(r"""^down_revision\s*=\s*["']([^"']+)["']""", re.MULTILINE)


@functools.cache
def head_revision() -> str | None:
    """The one revision no other migration follows (None when the files do not say plainly:
    several heads, or a merge Alembic must read)."""
    revisions: set[str] = set()
    followed: set[str] = set()
    for path in MIGRATIONS.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        revisions.update(_REVISION.findall(source))
        followed.update(_DOWN_REVISION.findall(source))
    heads = revisions - followed
    return heads.pop() if len(heads) == 1 else None


async def at_head(db: Database) -> bool:
    """Whether ``db`` records the newest revision (False for a new or older database)."""
    head = head_revision()
    if head is None:
        return False
    try:
        async with db.read_engine.connect() as conn:
            versions = set(
                (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars()
            )
    except DBAPIError:  # no version table yet: a new database
        return False
    return versions == {head}
