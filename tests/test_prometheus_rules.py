"""The Prometheus alerting rules shipped in docs/prometheus (issue 35): valid, every rule fires
and clears in ``promtool test rules``, and every series they read is one /metrics exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import service_missing

RULES = Path(__file__).resolve().parents[1] / "docs" / "prometheus"


@pytest.fixture
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        service_missing("promtool", "no promtool binary (make prometheus installs it)")
    assert found is not None
    return found


def _run(*args: str) -> str:
    done = subprocess.run(args, cwd=RULES, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_every_rule_fires_and_clears_in_promtool(promtool: str) -> None:
    assert "SUCCESS: 7 rules found" in _run(promtool, "check", "rules", "alerts.yml")
    assert "SUCCESS" in _run(promtool, "test", "rules", "alerts_test.yml")
    tested = yaml.safe_load((RULES / "alerts_test.yml").read_text())["tests"]
    checks = [c for t in tested for c in t["alert_rule_test"]]
    for rule in _rules():
        times = [c for c in checks if c["alertname"] == rule["alert"]]
        assert any(c["exp_alerts"] for c in times), f"{rule['alert']} never fires in the test"
        fired = min(_minutes(c["eval_time"]) for c in times if c["exp_alerts"])
        cleared = [c for c in times if not c["exp_alerts"] and _minutes(c["eval_time"]) > fired]
        assert cleared, f"{rule['alert']} never clears in the test"


def _minutes(duration: str) -> int:
    found = re.fullmatch(r"(\d+)m", duration)
    assert found is not None, f"eval_time {duration!r}: write it in minutes"
    return int(found[1])


def _rules() -> list[dict[str, str]]:
    groups = yaml.safe_load((RULES / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the names, not the engine
async def test_the_rules_read_only_series_that_metrics_exports(api: httpx.AsyncClient) -> None:
    exported = (await api.get("/metrics")).text
    families = set(re.findall(r"^# TYPE (\w+) ", exported, re.M))
    used = {name for rule in _rules() for name in re.findall(r"\bforager_\w+", rule["expr"])}
    assert len(used) >= 7
    assert used <= families, used - families
