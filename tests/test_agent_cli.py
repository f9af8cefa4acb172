"""`forager agent …` as a user runs it (in-process, through the real entry function): token
shown once, hashes stored, one-line errors."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support.cli import forager, one_error_line

AGENT_COMMANDS = [
    ["agent"],
    ["agent", "create"],
    ["agent", "list"],
    ["agent", "revoke"],
    ["agent", "rotate-token"],
    ["agent", "reset"],
    ["agent", "run"],
]


def test_help_of_every_agent_command(tmp_path: Path, cli_env: dict[str, str]) -> None:
    for command in AGENT_COMMANDS:
        result = forager(tmp_path, cli_env, *command, "--help")
        assert result.returncode == 0, (command, result.stderr)
        assert "Usage:" in result.stdout, command
    assert not (tmp_path / "data").exists()  # --help touches nothing


def test_create_list_rotate_reset_revoke(tmp_path: Path, cli_env: dict[str, str]) -> None:
    assert forager(tmp_path, cli_env, "db", "upgrade").returncode == 0  # as `forager serve` does
    created = forager(tmp_path, cli_env, "agent", "create", "--name", "home-1")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert len(token) >= 32 and "\n" not in token
    assert "shown only now" in created.stderr
    rows = sqlite3.connect(tmp_path / "data" / "forager.db").execute("SELECT * FROM agents")
    assert all(token not in str(value) for row in rows for value in row)

    listed = forager(tmp_path, cli_env, "agent", "list")
    assert listed.returncode == 0 and "home-1" in listed.stdout and "disconnected" in listed.stdout
    assert token not in listed.stdout

    rotated = forager(tmp_path, cli_env, "agent", "rotate-token", "home-1")
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.strip() != token and len(rotated.stdout.strip()) >= 32

    assert "only a blocked agent" in one_error_line(
        forager(tmp_path, cli_env, "agent", "reset", "1")
    )
    assert "home-1" in one_error_line(
        forager(tmp_path, cli_env, "agent", "create", "--name", "home-1")
    )
    assert "name must be" in one_error_line(
        forager(tmp_path, cli_env, "agent", "create", "--name", "bad/name")
    )
    assert "no agent" in one_error_line(forager(tmp_path, cli_env, "agent", "revoke", "nobody"))

    revoked = forager(tmp_path, cli_env, "agent", "revoke", "home-1")
    assert revoked.returncode == 0, revoked.stderr
    assert "revoked" in forager(tmp_path, cli_env, "agent", "list").stdout


def test_agent_run_refuses_a_bad_server_url_in_one_line(
    tmp_path: Path,
    cli_env: dict[str, str],
) -> None:
    line = one_error_line(
        forager(tmp_path, cli_env, "agent", "run", "--server", "ftp://x", "--token", "t" * 40)
    )
    assert "http(s)://host" in line and "t" * 40 not in line
    assert not (tmp_path / "data").exists()  # the agent needs no database
