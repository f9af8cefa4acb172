"""Hostile pages cannot freeze a parser: every parser and the classifier finish each one.

Each page is built and parsed in a child process with a generous budget (pages that took
minutes before issue 11 now take well under a second); the test fails when the child is still
busy at the deadline, or when a parser raised anything but a ``ParseError``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from forager.parse.registry import entries
from tests.parse.adversarial_pages import PAGES

ROOT = Path(__file__).resolve().parents[2]
BUDGET_SECONDS = 60  # the quadratic cases took 10 s to several minutes; fixed ones take < 2 s
# What the child finds: built-in parsers and plugins, not the parsers another test module
# registered from code in this process (tests/test_task_path.py's "hang").
FOUND = {e.name for e in entries() if e.parser is not None and e.origin != "module"}
TARGETS = ("classify", "looks_like_product", *sorted(FOUND))


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_parser_finishes_a_hostile_page(name: str) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.parse.adversarial_pages", name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=BUDGET_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        busy = out.strip().splitlines()[-1] if out.strip() else "building the page"
        pytest.fail(f"{name}: still busy after {BUDGET_SECONDS} s ({busy})")
    assert done.returncode == 0, f"{name} raised:\n{done.stderr[-3000:]}"
    finished = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("done ")]
    assert finished == list(TARGETS)
