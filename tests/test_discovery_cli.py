"""``forager job start|list|show|pause|resume|cancel`` (issue 32) against a real SQLite
database; the crawl itself: tests/test_discovery.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.support.cli import forager, one_error_line


def test_a_job_is_started_shown_and_controlled_from_the_command_line(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    assert forager(tmp_path, cli_env, "db", "upgrade").returncode == 0
    started = forager(
        tmp_path,
        cli_env,
        "job",
        "start",
        "--name",
        "kettles",
        "--start-url",
        "https://shop.example.com/",
        "--rule",
        "follow=/c/[a-z]+$@nav",
        "--rule",
        "parse=glob:https://shop.example.com/p/*",
        "--max-pages",
        "100",
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("1\tkettles\trunning\t1/100 pages")

    listed = forager(tmp_path, cli_env, "job", "list")
    assert listed.stdout.splitlines()[0].startswith("1\tkettles\trunning")
    shown = forager(tmp_path, cli_env, "job", "show", "1")
    assert "discovered 1  queued 1" in shown.stdout
    assert "depth 0: discovered 1" in shown.stdout

    assert "\tpaused\t" in forager(tmp_path, cli_env, "job", "pause", "1").stdout
    assert "\trunning\t" in forager(tmp_path, cli_env, "job", "resume", "1").stdout
    assert "\tcancelled\t" in forager(tmp_path, cli_env, "job", "cancel", "1").stdout
    again = forager(tmp_path, cli_env, "job", "resume", "1")
    assert again.returncode == 1
    assert one_error_line(again) == "error: crawl job 1 is cancelled; it cannot resume"


def test_a_bad_rule_is_refused_with_its_reason(tmp_path: Path, cli_env: dict[str, str]) -> None:
    assert forager(tmp_path, cli_env, "db", "upgrade").returncode == 0
    bad = forager(
        tmp_path,
        cli_env,
        "job",
        "start",
        "--name",
        "x",
        "--start-url",
        "https://shop.example.com/",
        "--rule",
        "follow=(",
    )
    assert bad.returncode == 1
    assert "rules[0].pattern is not a valid RE2 pattern" in one_error_line(bad)


def test_a_rule_line_reads_its_region_glob_and_recrawl_schedule() -> None:
    from forager.cli import _rule

    assert _rule("parse/86400=glob:https://shop.test/p/*@main.grid") == {
        "action": "parse",
        "pattern": "https://shop.test/p/*",
        "syntax": "glob",
        "region": "main.grid",
        "recrawl_seconds": 86400,
    }
    assert _rule("follow=/c/[a-z]+\\?page=\\d+$") == {
        "action": "follow",
        "pattern": "/c/[a-z]+\\?page=\\d+$",
        "syntax": "regex",
        "region": None,
    }


def test_a_jobs_request_profile_is_given_checked_and_sealed(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """--header / --cookie / --secret-cookie / --user-agent: checked as a task's profile, the
    secret stored sealed (issue 33)."""
    assert forager(tmp_path, cli_env, "db", "upgrade").returncode == 0
    base = ["job", "start", "--name", "de", "--start-url", "https://shop.example.com/"]
    base += ["--rule", "parse=/p/"]
    bad = forager(tmp_path, cli_env, *base, "--header", "Host: evil.example")
    assert bad.returncode == 1
    assert one_error_line(bad).startswith("error: request profile headers.0.name:")
    started = forager(
        tmp_path,
        cli_env,
        *base,
        "--header",
        "Accept-Language: de-DE",
        "--secret-cookie",
        "sid=sess-cli-Qw27",
        "--user-agent",
        "ShopperBot/2.0",
    )
    assert started.returncode == 0, started.stderr
    [db_file] = (tmp_path / "data").glob("*.db")
    with sqlite3.connect(db_file) as con:
        [stored] = con.execute("SELECT request_profile FROM crawl_jobs").fetchone()
    profile = json.loads(stored)
    assert profile["headers"] == [{"name": "Accept-Language", "value": "de-DE"}]
    assert profile["user_agent"] == "ShopperBot/2.0"
    assert profile["cookies"][0]["secret"] is True and "sess-cli-Qw27" not in stored
