"""``forager submit FILE|-``: URLs or JSON lines in bulk, through the API's submit path."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from sqlalchemy import select

from forager.config import Settings
from forager.db.models import CrawlTask
from forager.runtime import open_database
from tests.conftest import SettingsFactory
from tests.support.cli import forager, one_error_line


def _tasks(settings: Settings) -> dict[str, CrawlTask]:
    async def read() -> dict[str, CrawlTask]:
        db = await open_database(settings)
        try:
            async with db.reader() as session:
                return {t.url: t for t in await session.scalars(select(CrawlTask))}
        finally:
            await db.dispose()

    return asyncio.run(read())


def test_submit_a_file_of_urls_and_json_lines(
    tmp_path: Path, cli_env: dict[str, str], db_url: str, make_settings: SettingsFactory
) -> None:
    settings = make_settings()
    env = {**cli_env, "FORAGER_DATABASE_URL": db_url}
    lines = [
        "https://shop.example/p/1",
        "",
        "# a comment",
        "HTTPS://SHOP.EXAMPLE/p/1#reviews",  # the same URL once normalized
        "https://shop.example/p/2",
        "not a url",
        json.dumps({"url": "https://other.example/x", "priority": 2, "batch_name": "json"}),
        json.dumps({"url": "https://other.example/y", "priority": 99}),
        '{"url": "https://other.example/z",',
        json.dumps({"url": "https://other.example/w", "is_recurring": True, "colour": "red"}),
    ]
    urls = tmp_path / "urls.txt"
    urls.write_text("\n".join(lines) + "\n")

    first = forager(tmp_path, env, "submit", str(urls), "--batch-name", "bulk")
    assert first.returncode == 1, first.stderr
    assert first.stdout.strip().splitlines()[-1] == "created 3, duplicate 1, invalid 4"
    problems = first.stderr.strip().splitlines()
    assert [p.split(":", 1)[0] for p in problems] == ["line 6", "line 8", "line 9", "line 10"]
    assert "priority" in problems[1] and "JSON" in problems[2] and "colour" in problems[3]

    tasks = _tasks(settings)
    assert set(tasks) == {
        "https://shop.example/p/1",
        "https://shop.example/p/2",
        "https://other.example/x",
    }
    json_task = tasks["https://other.example/x"]
    assert (json_task.priority, json_task.batch_name, json_task.created_by) == (2, "json", "cli")
    assert tasks["https://shop.example/p/2"].batch_name == "bulk"

    again = forager(tmp_path, env, "submit", "-", stdin="https://shop.example/p/2\n")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "created 0, duplicate 1, invalid 0"


def test_submit_refuses_bad_options_and_missing_files(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("https://shop.example/p/1\n")
    bad = one_error_line(forager(tmp_path, cli_env, "submit", str(urls), "--priority", "0"))
    assert "priority" in bad
    missing = one_error_line(forager(tmp_path, cli_env, "submit", str(tmp_path / "nope.txt")))
    assert "cannot read" in missing and "nope.txt" in missing


def test_submit_adaptive_recrawl_and_tags_from_the_command_line(
    tmp_path: Path, cli_env: dict[str, str], db_url: str, make_settings: SettingsFactory
) -> None:
    settings = make_settings()
    env = {**cli_env, "FORAGER_DATABASE_URL": db_url}
    lines = [
        "https://shop.example/kettle",
        json.dumps({"url": "https://shop.example/toaster", "tags": ["toasters"]}),
    ]
    urls = tmp_path / "urls.txt"
    urls.write_text("\n".join(lines) + "\n")
    done = forager(
        tmp_path,
        env,
        "submit",
        str(urls),
        *("--recurring", "--frequency", "86400", "--adaptive", "--min-frequency", "3600"),
        *("--tag", "kettles", "--tag", "watch"),
    )
    assert done.returncode == 0, done.stderr
    tasks = _tasks(settings)
    kettle = tasks["https://shop.example/kettle"]
    assert (kettle.adaptive_recrawl, kettle.min_crawl_frequency_seconds) == (True, 3600)
    assert kettle.current_crawl_frequency_seconds == 86_400

    async def tags() -> dict[str, list[str]]:
        from forager.products import tags as product_tags

        db = await open_database(settings)
        try:
            async with db.reader() as session:
                found = await product_tags.of(session, [t.url_hash for t in tasks.values()])
        finally:
            await db.dispose()
        return {t.url: found.get(t.url_hash, []) for t in tasks.values()}

    # A JSON line's own tags replace the command line's, like every other option.
    assert asyncio.run(tags()) == {
        "https://shop.example/kettle": ["kettles", "watch"],
        "https://shop.example/toaster": ["toasters"],
    }
