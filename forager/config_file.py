"""The seed's optional YAML configuration file (``FORAGER_CONFIG_FILE``) and its environment
variable names (with the ``FORAGER_`` prefix), as sources of ``forager.config.Settings``.

Precedence, highest first: explicit values, ``FORAGER_*`` variables by Forager's own names,
the seed's names (``FORAGER_POLLING_INTERVAL_SECONDS`` …), ``.env``, the YAML file. A key of
the file that means nothing here, or a file that cannot be read, is refused naming it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from forager.errors import ConfigError

# The seed's YAML (``scraper:`` …) path → Forager's setting; None: accepted, nothing to set
# (Forager runs Chromium headless and serves /metrics always).
SEED_FILE_KEYS: dict[str, str | None] = {
    "scraper.lifecycle.max_lifetime_hours": "monitor_max_lifetime_hours",
    "scraper.lifecycle.polling_interval": "monitor_interval_seconds",
    "scraper.lifecycle.staleness_threshold": "monitor_staleness_seconds",
    "scraper.resources.memory.soft_limit_mb": "monitor_memory_soft_limit_mb",
    "scraper.resources.memory.hard_limit_mb": "monitor_memory_hard_limit_mb",
    "scraper.resources.queue.max_size": "monitor_max_queue_size",
    "scraper.resources.queue.max_size_mb": "monitor_max_queue_size_mb",
    "scraper.resilience.circuit_breaker.threshold": "breaker_failure_threshold",
    "scraper.resilience.circuit_breaker.timeout": "breaker_open_seconds",
    "scraper.resilience.circuit_breaker.success_threshold": "breaker_success_threshold",
    "scraper.resilience.retry.max_attempts": "monitor_retry_max_attempts",
    "scraper.resilience.retry.base_delay": "monitor_retry_base_seconds",
    "scraper.resilience.retry.max_delay": "monitor_retry_max_seconds",
    "scraper.browser.timeouts.page": "monitor_page_timeout_seconds",
    "scraper.browser.timeouts.navigation": "browser_navigation_timeout_seconds",
    "scraper.browser.timeouts.selector": "browser_selector_timeout_seconds",
    "scraper.browser.headless": None,  # a switch: see SEED_SWITCHES
    "scraper.monitoring.prometheus.enabled": None,  # a switch: see SEED_SWITCHES
    "scraper.monitoring.prometheus.port": "prometheus_port",
    "scraper.monitoring.health_check.enabled": "health_check_enabled",
    "scraper.monitoring.logging.level": "log_level",
    "scraper.monitoring.logging.structured": "log_format",
}
# The seed's environment variables (after FORAGER_) that name a Forager setting differently.
SEED_ENV_NAMES: dict[str, str] = {
    "SCRAPER_MAX_LIFETIME_HOURS": "monitor_max_lifetime_hours",
    "MEMORY_SOFT_LIMIT_MB": "monitor_memory_soft_limit_mb",
    "MEMORY_HARD_LIMIT_MB": "monitor_memory_hard_limit_mb",
    "POLLING_INTERVAL_SECONDS": "monitor_interval_seconds",
    "STALENESS_THRESHOLD_SECONDS": "monitor_staleness_seconds",
    "MAX_QUEUE_SIZE": "monitor_max_queue_size",
    "MAX_QUEUE_SIZE_MB": "monitor_max_queue_size_mb",
    "CIRCUIT_BREAKER_THRESHOLD": "breaker_failure_threshold",
    "CIRCUIT_BREAKER_TIMEOUT_SECONDS": "breaker_open_seconds",
    "CIRCUIT_BREAKER_SUCCESS_THRESHOLD": "breaker_success_threshold",
    "RETRY_MAX_ATTEMPTS": "monitor_retry_max_attempts",
    "RETRY_BASE_DELAY_SECONDS": "monitor_retry_base_seconds",
    "RETRY_MAX_DELAY_SECONDS": "monitor_retry_max_seconds",
    "PAGE_TIMEOUT_SECONDS": "monitor_page_timeout_seconds",
    "NAVIGATION_TIMEOUT_SECONDS": "browser_navigation_timeout_seconds",
    "SELECTOR_TIMEOUT_SECONDS": "browser_selector_timeout_seconds",
    "DB_CONNECTION_POOL_SIZE": "db_pool_size",
    "DB_CONNECTION_TIMEOUT_SECONDS": "db_pool_timeout_seconds",
}
# The seed's on/off switches for what Forager always does: ``true`` asks for exactly that and
# is accepted; ``false`` stops the start, naming the variable and what to do instead. One
# works both ways: ENABLE_ADAPTIVE_TIMEOUTS=false gives every monitor poll the whole page
# timeout (its adaptive floor raised to a day: ``poll_timeout`` caps it at the page timeout).
SEED_SWITCHES: dict[str, tuple[str | None, str]] = {
    # name (after FORAGER_) -> (its YAML key, why false cannot be honoured)
    "BROWSER_HEADLESS": (
        "scraper.browser.headless",
        "Forager runs Chromium headless only (it runs unattended, sandboxed)",
    ),
    "ENABLE_PROMETHEUS_METRICS": (
        "scraper.monitoring.prometheus.enabled",
        "/metrics is always served (FORAGER_PROMETHEUS_PORT moves it to a port of its own)",
    ),
    "ENABLE_ADAPTIVE_POLLING": (
        None,
        "a monitor's interval is adaptive within its bounds; for a fixed one give it equal "
        "min_interval_seconds and max_interval_seconds",
    ),
    "ENABLE_MATCH_STATE_DETECTION": (
        None,
        "monitors always detect changes (a snapshot per change, diffed field by field)",
    ),
}
NO_ADAPTIVE_TIMEOUTS = {"monitor_min_timeout_seconds": 86400.0}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _switch(name: str, raw: object) -> bool:
    """The seed switch ``name``'s value as a bool; anything else is refused naming it."""
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}: must be true or false (got {raw!r})")


def _check_switch(name: str, raw: object) -> dict[str, Any]:
    """What switch ``name`` set to ``raw`` asks of the settings (refused when it cannot be)."""
    on = _switch(name, raw)
    if name == "FORAGER_ENABLE_ADAPTIVE_TIMEOUTS":
        return {} if on else dict(NO_ADAPTIVE_TIMEOUTS)
    if not on:
        short = name.removeprefix("FORAGER_")
        raise ConfigError(f"{name}=false is not supported: {SEED_SWITCHES[short][1]}")
    return {}


def _flatten(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and (path == "scraper" or path.startswith("scraper.")):
            flat |= _flatten(value, path + ".")
        else:
            flat[path] = value
    return flat


def read_file(path: Path, fields: set[str]) -> dict[str, Any]:
    """The settings a YAML file sets: the seed's ``scraper:`` tree, and top-level keys named
    like Forager's settings (``serve_workers: 2``)."""
    where = f"FORAGER_CONFIG_FILE ({path})"
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not YAML: {str(exc).splitlines()[0]}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: must be a mapping of keys to values")
    values: dict[str, Any] = {}
    for key, value in _flatten(doc).items():
        switch = next((n for n, (k, _) in SEED_SWITCHES.items() if k == key), None)
        if switch is not None:
            values |= _check_switch(f"FORAGER_{switch}", value) if value is not None else {}
        elif key in SEED_FILE_KEYS:
            target = SEED_FILE_KEYS[key]
            if target == "log_format":
                value = "json" if value is True else "text" if value is False else value
            if target is not None:
                values[target] = value
        elif key in fields and key != "config_file":
            values[key] = value
        else:
            raise ConfigError(f"{where}: unknown key {key!r}")
    return values


class SeedSources(PydanticBaseSettingsSource):
    """The seed's environment names, then its YAML file (``FORAGER_CONFIG_FILE``)."""

    def __init__(self, settings_cls: type[BaseSettings], *, file: bool) -> None:
        super().__init__(settings_cls)
        self.file = file

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # everything is read at once in __call__

    def __call__(self) -> dict[str, Any]:
        fields = set(self.settings_cls.model_fields)
        if self.file:
            path = os.environ.get("FORAGER_CONFIG_FILE", "").strip()
            return read_file(Path(path), fields) if path else {}
        values: dict[str, Any] = {}
        for name, target in SEED_ENV_NAMES.items():
            raw = os.environ.get(f"FORAGER_{name}")
            if raw is not None and f"FORAGER_{target.upper()}" not in os.environ:
                values[target] = raw
        for name in [*SEED_SWITCHES, "ENABLE_ADAPTIVE_TIMEOUTS"]:
            raw = os.environ.get(f"FORAGER_{name}")
            if raw is not None:
                found = _check_switch(f"FORAGER_{name}", raw)
                values |= {
                    k: v for k, v in found.items() if f"FORAGER_{k.upper()}" not in os.environ
                }
        return values
