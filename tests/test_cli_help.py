"""Every `forager … --help` reads as plain help (issue 34): flags take no value, no reST markup,
no seed section numbers, and the mission commands say what a mission is."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from sqlalchemy import select

from forager.cli import app
from forager.config import load_settings
from forager.db.models import CrawlTask
from forager.runtime import open_database
from tests.support.cli import forager


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    if hasattr(group, "commands"):  # a group (Typer's own copy of Click's)
        for name, command in group.commands.items():
            yield from _commands(command, (*path, name))


def test_no_help_shows_a_value_for_a_flag_or_markup_or_a_seed_section(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    commands = list(_commands(typer.main.get_command(app)))
    assert ("submit",) in commands and ("apikey", "create") in commands
    for command in commands:
        shown = forager(tmp_path, cli_env, *command, "--help")
        assert shown.returncode == 0, (command, shown.stderr)
        text = shown.stdout
        assert "<bool>" not in text, command
        assert "``" not in text, command
        assert not re.search(r"\bseed\b|§", text, re.IGNORECASE), (command, text)
    submit = forager(tmp_path, cli_env, "submit", "--help").stdout
    assert re.search(r"^  --recurring\s+Crawl again", submit, re.MULTILINE), submit
    assert re.search(r"^  --adaptive\s+With --recurring", submit, re.MULTILINE), submit
    parse = forager(tmp_path, cli_env, "parse", "--help").stdout
    assert '"product" and "items"' in parse, parse
    orchestrate = forager(tmp_path, cli_env, "orchestrate", "--help").stdout
    assert "A mission is one ad-library search" in orchestrate


def test_the_recurring_flag_as_the_help_shows_it(
    tmp_path: Path, cli_env: dict[str, str], db_url: str
) -> None:
    (tmp_path / "urls.txt").write_text("https://shop.example/p/1\n")
    env = {**cli_env, "FORAGER_DATABASE_URL": db_url}
    ran = forager(tmp_path, env, "submit", "urls.txt", "--recurring", "--frequency", "3600")
    assert ran.returncode == 0, ran.stderr

    async def task() -> CrawlTask | None:
        db = await open_database(load_settings(database_url=db_url, data_dir=tmp_path / "d"))
        try:
            async with db.reader() as session:
                found: CrawlTask | None = await session.scalar(select(CrawlTask))
                return found
        finally:
            await db.dispose()

    made = asyncio.run(task())
    assert made is not None and (made.is_recurring, made.crawl_frequency_seconds) == (True, 3600)
