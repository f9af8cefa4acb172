"""The ``forager`` command line for tests: in-process by default, a real subprocess where the
process itself is what is tested (signals, the interpreter's traceback, the module entry point).

In-process runs go through ``forager.cli.main`` — the same one-line error handling a user
gets — inside Click's ``CliRunner`` isolation (captured stdout/stderr, the given environment,
the test's directory), which saves the 1–2 s a fresh interpreter spends importing Forager.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from typer.testing import CliRunner

from forager import cli
from forager.config import get_settings


@dataclass(frozen=True, slots=True)
class Ran:
    """What one command printed and how it exited (as ``subprocess.CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


def clean_env(data_dir: Path) -> dict[str, str]:
    """The caller's environment without FORAGER_*, with a data dir of the test's own."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FORAGER_")}
    clean.update(
        FORAGER_DATA_DIR=str(data_dir),
        FORAGER_DEFAULT_CRAWL_DELAY_SECONDS="0",
        COLUMNS="200",  # rich wraps long lines at the terminal width
        XDG_CACHE_HOME=str(data_dir.parent / "cache"),  # `crawl`'s schema template, not ~/.cache
    )
    return clean


def forager(cwd: Path, env: Mapping[str, str], *args: str, stdin: str | None = None) -> Ran:
    """Run ``forager ARGS`` in this process, in ``cwd`` (so no ``.env`` of the repository
    leaks in) with exactly the FORAGER_* variables of ``env`` (and ``stdin`` as its input)."""
    overrides: dict[str, str | None] = {k: None for k in os.environ if k.startswith("FORAGER_")}
    overrides.update(env)
    runner = CliRunner()
    with (
        _fresh_settings(),
        runner.isolation(input=stdin, env=overrides) as (stdout, stderr, _),
        contextlib.chdir(cwd),
        mock.patch.object(sys, "argv", ["forager", *args]),
    ):
        try:
            cli.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        sys.stdout.flush()
        sys.stderr.flush()
        return Ran(code, stdout.getvalue().decode(), stderr.getvalue().decode())


def forager_process(
    cwd: Path, env: Mapping[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m forager.cli ARGS`` as a real process, the way a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "forager.cli", *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_error_line(result: Ran | subprocess.CompletedProcess[str]) -> str:
    """The single ``error: …`` line a failed command prints, with no traceback."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@contextlib.contextmanager
def _fresh_settings() -> Iterator[None]:
    """Settings read from this run's environment, and none left behind for the next."""
    get_settings.cache_clear()
    cli._state["debug"] = False  # set by the --debug option of each run
    try:
        yield
    finally:
        get_settings.cache_clear()
