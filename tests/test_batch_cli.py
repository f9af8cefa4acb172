"""``forager batch list|show|pause|resume|cancel|restart`` (issue 35) against a real SQLite
database; the moves against workers: tests/test_batches.py."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import forager, one_error_line


def test_a_batch_is_listed_shown_and_moved_from_the_command_line(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    assert forager(tmp_path, cli_env, "db", "upgrade").returncode == 0
    lines = "".join(f"https://shop.example/p/{n}\n" for n in range(3))
    submitted = forager(tmp_path, cli_env, "submit", "-", "--batch-name", "bf", stdin=lines)
    assert submitted.returncode == 0, submitted.stderr

    listed = forager(tmp_path, cli_env, "batch", "list")
    assert listed.stdout.startswith("bf\trunning\t0/3 done\t0 paused\t0 products\tstarted ")

    paused = forager(tmp_path, cli_env, "batch", "pause", "bf")
    assert paused.stdout.splitlines()[0] == "3 tasks of batch 'bf' moved to paused"
    assert paused.stdout.splitlines()[1].startswith("bf\tpaused\t0/3 done\t3 paused")
    shown = forager(tmp_path, cli_env, "batch", "show", "bf").stdout.splitlines()
    assert shown[1:] == [
        "  by status: paused 3",
        "  failures: none",
        "  pages: none lately  estimated end: -",
    ]
    cancelled = forager(tmp_path, cli_env, "batch", "cancel", "bf")  # paused ones too
    assert cancelled.stdout.splitlines()[1].startswith("bf\tfinished\t3/3 done")
    everything = forager(tmp_path, cli_env, "batch", "restart", "bf", "--all")
    assert everything.stdout.splitlines()[0] == "3 tasks of batch 'bf' moved to pending"

    missing = forager(tmp_path, cli_env, "batch", "pause", "nope")
    assert missing.returncode == 1
    assert one_error_line(missing) == "error: batch 'nope' has no tasks"
