"""Settings: environment variables are read, unsafe combinations refused with a clear message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forager.config import load_settings
from forager.errors import ConfigError


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FORAGER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("FORAGER_MAX_RETRIES", "7")
    settings = load_settings()
    assert settings.max_retries == 7
    assert settings.resolved_database_url == f"sqlite+aiosqlite:///{tmp_path / 'forager.db'}"
    assert settings.pages_dir == tmp_path / "pages"


def test_dotenv_file_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("FORAGER_PORT=9123\n")
    assert load_settings().port == 9123


@pytest.mark.parametrize(
    "url", ["postgresql://u@h/db", "postgres://u@h/db", "postgresql+psycopg2://u@h/db"]
)
def test_plain_postgres_urls_use_asyncpg(url: str) -> None:
    assert load_settings(database_url=url).resolved_database_url == "postgresql+asyncpg://u@h/db"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"database_url": "mysql://u@h/db"}, "FORAGER_DATABASE_URL must be"),
        (
            {"heartbeat_seconds": 40, "lease_seconds": 60},
            "FORAGER_HEARTBEAT_SECONDS must be at most half",
        ),
        (
            {"retry_base_seconds": 100, "retry_max_seconds": 10},
            "FORAGER_RETRY_BASE_SECONDS must not",
        ),
        ({"log_level": "LOUD"}, "FORAGER_LOG_LEVEL must be"),
        ({"port": 0}, "FORAGER_PORT"),
        ({"max_body_bytes": 10}, "FORAGER_MAX_BODY_BYTES"),
    ],
)
def test_unsafe_settings_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(**overrides)


def test_settings_are_frozen() -> None:
    settings = load_settings()
    with pytest.raises(ValueError, match="frozen"):
        settings.port = 1  # type: ignore[misc]


def test_the_configuration_page_documents_every_setting() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "CONFIGURATION.md").read_text()
    from forager.config import Settings

    missing = [n for n in Settings.model_fields if f"`FORAGER_{n.upper()}`" not in page]
    assert missing == []


def test_agents_heartbeat_within_half_a_short_lease() -> None:
    # A short lease (no agents in mind) must not be refused; agents are told to beat faster.
    assert load_settings(lease_seconds=3.0, heartbeat_seconds=1.0).agent_heartbeat_interval == 1.5
    assert load_settings(lease_seconds=300.0).agent_heartbeat_interval == 10.0


# SQLite has no connection pool to size.
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_pool_settings_reach_the_postgresql_pool(make_settings: Any, db_url: str) -> None:
    from forager.runtime import open_database

    settings = make_settings(db_pool_size=3, db_max_overflow=1, db_pool_timeout_seconds=2.5)
    db = await open_database(settings, migrate=False)
    try:
        pool: Any = db.engine.pool
        assert (pool.size(), pool.timeout()) == (3, 2.5)
    finally:
        await db.dispose()
