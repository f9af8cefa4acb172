"""Commands never write to a database the user did not mean (issue 34): run where no database
is, an operator command says which one it looked for and how to point at the right one instead
of creating an empty one; ``forager submit --api`` sends to a running server from any folder."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from sqlalchemy import func, select

from forager.apikeys import create_key
from forager.db.models import CrawlTask
from tests.conftest import PG_HOST, SettingsFactory, _pg_admin
from tests.support.agents import app_server
from tests.support.cli import clean_env, forager, forager_process, one_error_line

OPERATOR_COMMANDS = [
    ["apikey", "create", "--name", "admin", "--role", "admin"],
    ["apikey", "list"],
    ["apikey", "revoke", "admin"],
    ["agent", "create", "--name", "home-1"],
    ["agent", "list"],
    ["pages", "prune", "--days", "1"],
    ["submit", "urls.txt"],
]


@pytest.mark.parametrize("command", OPERATOR_COMMANDS, ids=lambda c: "-".join(c[:2]))
def test_a_command_run_where_no_database_is_refuses_and_creates_nothing(
    tmp_path: Path, cli_env: dict[str, str], command: list[str]
) -> None:
    (tmp_path / "urls.txt").write_text("https://shop.example/p/1\n")
    line = one_error_line(forager(tmp_path, cli_env, *command))
    assert f"no Forager database at {tmp_path / 'data' / 'forager.db'}" in line
    assert "FORAGER_DATABASE_URL" in line and "forager db upgrade" in line
    if command[0] == "submit":
        assert "forager submit --api URL" in line
    assert not (tmp_path / "data").exists()  # no file, not even the folder


def test_the_refusal_is_a_one_line_error_of_the_real_process(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    ran = forager_process(tmp_path, cli_env, "apikey", "create", "--name", "admin")
    assert "no Forager database at" in one_error_line(ran)
    assert not (tmp_path / "data").exists()


def test_an_empty_postgresql_database_is_refused_with_the_password_masked(
    tmp_path: Path, cli_env: dict[str, str], pg_template: str
) -> None:
    name = f"forager_empty_{uuid.uuid4().hex[:12]}"
    asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        cli_env["FORAGER_DATABASE_URL"] = f"postgresql://root:hunter2@{PG_HOST}/{name}"
        line = one_error_line(forager(tmp_path, cli_env, "apikey", "list"))
        assert f"no Forager database at postgresql+asyncpg://{PG_HOST}/{name}" in line
        assert "hunter2" not in line and "root" not in line
        created = forager(tmp_path, cli_env, "db", "upgrade")  # the way to make one on purpose
        assert created.returncode == 0, created.stderr
        listed = forager(tmp_path, cli_env, "apikey", "list")
        assert listed.returncode == 0, listed.stderr
    finally:
        asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_commands_work_on_the_database_db_upgrade_made(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    assert forager(tmp_path, cli_env, "db", "upgrade").returncode == 0
    created = forager(tmp_path, cli_env, "apikey", "create", "--name", "admin", "--role", "admin")
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("fgr_")


async def test_submit_with_api_sends_to_the_running_server_from_any_folder(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    settings = make_settings(serve_workers=0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    urls = elsewhere / "urls.txt"
    urls.write_text(
        "https://shop.example/p/1\nhttps://shop.example/p/2\n"
        '{"url": "https://shop.example/p/3", "priority": 1}\n'
        "htp://shop.example/p/4\nhttps://shop.example/p/1#again\n"
    )
    env = clean_env(elsewhere / "data")  # this folder has no database, and must get none
    async with app_server(settings) as (base_url, app):
        _, key = await create_key(app.state.runtime.db, "loader", "admin")
        env["FORAGER_API_KEY"] = key
        ran = await asyncio.to_thread(
            forager_process, elsewhere, env, "submit", str(urls), "--api", base_url
        )
        assert ran.returncode == 1, ran.stderr  # one invalid line
        assert ran.stdout.strip() == "created 3, duplicate 1, invalid 1"
        [problem] = ran.stderr.strip().splitlines()
        assert problem.startswith("line 4: ") and "'htp'" in problem
        async with app.state.runtime.db.reader() as session:
            tasks = {t.url: t for t in await session.scalars(select(CrawlTask))}
        assert set(tasks) == {f"https://shop.example/p/{n}" for n in (1, 2, 3)}
        assert tasks["https://shop.example/p/3"].priority == 1
        assert tasks["https://shop.example/p/1"].priority == 5
        assert tasks["https://shop.example/p/1"].created_by == "loader"

        env["FORAGER_API_KEY"] = "fgr_not-a-key"
        refused = await asyncio.to_thread(
            forager_process, elsewhere, env, "submit", str(urls), "--api", base_url
        )
        line = one_error_line(refused)
        assert "refused the API key (401" in line and "make apikey" in line
        async with app.state.runtime.db.reader() as session:
            assert await session.scalar(select(func.count()).select_from(CrawlTask)) == 3
    assert not (elsewhere / "data").exists()


def test_submit_with_api_but_no_key_says_how_to_give_one(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    (tmp_path / "urls.txt").write_text("https://shop.example/p/1\n")
    line = one_error_line(
        forager(tmp_path, cli_env, "submit", "urls.txt", "--api", "http://127.0.0.1:9")
    )
    assert "--api-key" in line and "FORAGER_API_KEY" in line
