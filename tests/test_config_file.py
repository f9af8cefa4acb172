"""The seed's YAML file (``FORAGER_CONFIG_FILE``) and environment names (issue 15): what they
set, what overrides them, and what is refused naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from forager.config import load_settings
from forager.errors import ConfigError

SEED_YAML = """
scraper:
  lifecycle:
    max_lifetime_hours: 3
    polling_interval: 4.5
    staleness_threshold: 600
  resources:
    memory: {soft_limit_mb: 1024, hard_limit_mb: 1536}
    queue: {max_size: 500, max_size_mb: 5}
  resilience:
    circuit_breaker: {threshold: 7, timeout: 90, success_threshold: 3}
    retry: {max_attempts: 4, base_delay: 2, max_delay: 8}
  browser:
    timeouts: {page: 20, navigation: 30, selector: 5}
    headless: true
  monitoring:
    prometheus: {enabled: true, port: 9090}
    health_check: {enabled: false}
    logging: {level: WARN, structured: true}
serve_workers: 2
"""


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "forager.yaml"
    monkeypatch.setenv("FORAGER_CONFIG_FILE", str(path))
    return path


def test_the_seeds_yaml_file_sets_forager_settings(config_file: Path) -> None:
    config_file.write_text(SEED_YAML)
    s = load_settings()
    assert (s.monitor_max_lifetime_hours, s.monitor_interval_seconds) == (3, 4.5)
    assert (s.monitor_staleness_seconds, s.monitor_memory_soft_limit_mb) == (600, 1024)
    assert (s.breaker_failure_threshold, s.breaker_open_seconds) == (7, 90)
    assert (s.breaker_success_threshold, s.monitor_retry_max_attempts) == (3, 4)
    assert (s.monitor_retry_base_seconds, s.monitor_retry_max_seconds) == (2, 8)
    assert (s.monitor_page_timeout_seconds, s.health_check_enabled) == (20, False)
    assert (s.log_level, s.log_format, s.serve_workers) == ("WARN", "json", 2)
    assert (s.monitor_max_queue_size, s.monitor_max_queue_size_mb) == (500, 5)


def test_environment_overrides_the_file_and_seed_names_work(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file.write_text(SEED_YAML)
    monkeypatch.setenv("FORAGER_POLLING_INTERVAL_SECONDS", "3.5")  # the seed's name
    monkeypatch.setenv("FORAGER_CIRCUIT_BREAKER_THRESHOLD", "9")
    monkeypatch.setenv("FORAGER_SERVE_WORKERS", "6")
    s = load_settings()
    assert (s.monitor_interval_seconds, s.breaker_failure_threshold) == (3.5, 9)
    assert s.serve_workers == 6
    # Forager's own name wins over the seed's.
    monkeypatch.setenv("FORAGER_MONITOR_INTERVAL_SECONDS", "5")
    assert load_settings().monitor_interval_seconds == 5


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            "scraper:\n  lifecycle:\n    max_lifetime_hour: 3\n",
            "scraper.lifecycle.max_lifetime_hour",
        ),
        ("colour: blue\n", "'colour'"),
        (
            "scraper:\n  lifecycle:\n    polling_interval: fast\n",
            "FORAGER_MONITOR_INTERVAL_SECONDS",
        ),
        ("scraper:\n  lifecycle:\n    staleness_threshold: 60\n", "FORAGER_MONITOR_"),
        ("- a list\n", "mapping"),
        ("key: [unclosed\n", "not YAML"),
    ],
)
def test_bad_files_are_refused_naming_the_key(config_file: Path, text: str, named: str) -> None:
    config_file.write_text(text)
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("[", r"\[")):
        load_settings()


def test_a_missing_file_is_refused(config_file: Path) -> None:
    with pytest.raises(ConfigError, match=r"FORAGER_CONFIG_FILE .* cannot be read"):
        load_settings()
