"""What the fetcher tests share: where Chromium is, fetch settings without a database, a
robots.txt refresh with the test's own fetchers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import Domain
from forager.domains.robots import refresh_robots
from forager.fetch.fetcher_set import FetcherSet
from tests.conftest import service_missing

CHROMIUM = Path(os.environ.get("FORAGER_CHROMIUM_PATH", "/usr/bin/chromium"))
KINDS = ("http", "impersonate", "browser")


def require(kind: str) -> str:
    """``kind``, after skipping (failing in CI) when it is the browser and Chromium is absent."""
    if kind == "browser" and not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        service_missing("Chromium", f"no executable at {CHROMIUM}; `make chromium` installs it")
    return kind


def fetch_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Settings for driving fetchers directly (the database URL is never opened)."""
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "database_url": f"sqlite:///{tmp_path / 'unused.db'}",
        "fetch_timeout_seconds": 10.0,
        "connect_timeout_seconds": 2.0,
        "chromium_path": CHROMIUM,
    }
    return Settings(**(values | overrides))


async def refresh_robots_now(
    db: Database, settings: Settings, domain_id: int
) -> tuple[Domain, str | None]:
    """``refresh_robots`` as the API's refresh calls it, with fetchers and a box built (and the
    fetchers closed) here in place of the ``Runtime``'s."""
    fetchers = FetcherSet(settings)
    try:
        return await refresh_robots(
            db, settings, domain_id, fetcher=fetchers, box=SecretBox(settings)
        )
    finally:
        await fetchers.aclose()
