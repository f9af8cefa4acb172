"""A migrated, empty SQLite database kept as a template for throwaway databases.

``forager crawl`` starts each run on a new database; migrating one from nothing runs every
revision (0.2 s, and importing Alembic 0.1 s, of a run that may last a second). The first run
keeps a copy of its freshly migrated database in the user's cache directory; later runs copy
that file instead. The copy is named by a fingerprint of Forager's version and its migration
files, so a new revision or release makes (and keeps) a new template, never uses a stale one.
Nothing here is required: when the cache cannot be read or written, the run migrates.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import sqlite3
from pathlib import Path

from forager import __version__

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).parent / "migrations" / "versions"


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/forager`` (default ``~/.cache/forager``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "forager"


def fingerprint() -> str:
    """Forager's version and each migration file's name, size and change time."""
    digest = hashlib.sha256(__version__.encode())
    for entry in sorted(os.scandir(MIGRATIONS), key=lambda e: e.name):
        if entry.name.endswith(".py"):
            stat = entry.stat()
            digest.update(f"{entry.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def template_path() -> Path:
    """Where the template of this version and these migrations is kept."""
    return cache_dir() / f"sqlite-schema-{fingerprint()}.db"


def copy_template(template: Path, target: Path) -> bool:
    """Put ``template`` at ``target`` (a database file not yet there); False when there is
    no template to copy."""
    try:
        shutil.copyfile(template, target)
    except OSError:
        with contextlib.suppress(OSError):
            target.unlink()
        return False
    return True


def keep_template(template: Path, migrated: Path) -> None:
    """Keep a copy of ``migrated`` (a database just migrated, still empty) as ``template``.

    SQLite's backup API copies a consistent image, whatever is in the write-ahead log; the
    file appears whole or not at all (temp + rename).
    """
    partial = template.with_name(f"{template.name}.{os.getpid()}.tmp")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        with (
            contextlib.closing(sqlite3.connect(migrated)) as source,
            contextlib.closing(sqlite3.connect(partial)) as copy,
        ):
            source.backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        os.replace(partial, template)
    except (OSError, sqlite3.Error) as exc:
        log.debug("no schema template kept in %s: %s", template.parent, exc)
        with contextlib.suppress(OSError):
            partial.unlink()
