"""The ``forager`` command line: in-process through its real entry function, and as a real
process where the process is the point (the module entry, signals, ``--debug`` tracebacks)."""

from __future__ import annotations

import contextlib
import gc
import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from forager import __version__, oneshot
from forager.config import load_settings
from forager.db import template
from forager.db.migrate import head_revision
from forager.queue.submit import SubmitSpec, submit_urls
from forager.runtime import open_database
from tests.conftest import service_missing
from tests.support.cli import forager, forager_process, one_error_line
from tests.support.dashboard import CHROMIUM
from tests.support.site import TestSite
from tests.support.waiting import eventually

SUBCOMMANDS = [["serve"], ["worker"], ["crawl"], ["parse"], ["db", "upgrade"]]

PRODUCT_PAGE = """<!doctype html>
<html><head><title>Trail Shoe | Example Shop</title>
<script type="application/ld+json">
{"@context": "https://schema.org", "@type": "Product", "name": "Trail Shoe",
 "sku": "TS-42", "brand": {"@type": "Brand", "name": "Acme"},
 "image": ["https://shop.example.com/img/ts-1.jpg", "https://shop.example.com/img/ts-2.jpg"],
 "offers": {"@type": "Offer", "price": "19.99", "priceCurrency": "EUR",
            "availability": "https://schema.org/InStock"}}
</script></head>
<body><h1>Trail Shoe</h1><p class="price">€19.99</p></body></html>
"""

ROBOT_CHECK_PAGE = """<!doctype html>
<html><head><title>Amazon.com</title></head><body>
<h4>Enter the characters you see below</h4>
<p>Sorry, we just need to make sure you're not a robot.</p>
<form method="get" action="/errors/validateCaptcha">
<img src="https://images-na.ssl-images-amazon.com/captcha/abc/Captcha_xyz.jpg">
<input id="captchacharacters" name="field-keywords" type="text">
<button type="submit">Try different image</button></form>
</body></html>
"""


# --------------------------------------------------------------------------- help, version


def test_help_of_every_command(tmp_path: Path, cli_env: dict[str, str]) -> None:
    top = forager(tmp_path, cli_env, "--help")
    assert top.returncode == 0, top.stderr
    for name in ("serve", "worker", "crawl", "parse", "db"):
        assert name in top.stdout
    for command in SUBCOMMANDS:
        result = forager(tmp_path, cli_env, *command, "--help")
        assert result.returncode == 0, (command, result.stderr)
        assert "Usage:" in result.stdout, command
    assert not (tmp_path / "data").exists()  # --help touches nothing


def test_version_from_the_module_entry_point(tmp_path: Path, cli_env: dict[str, str]) -> None:
    result = forager_process(tmp_path, cli_env, "--version")  # a real interpreter, as a user
    assert result.returncode == 0
    assert result.stdout.strip() == f"forager {__version__}"


def test_no_arguments_shows_help_without_an_error(tmp_path: Path, cli_env: dict[str, str]) -> None:
    result = forager(tmp_path, cli_env)
    assert "Usage:" in result.stdout + result.stderr
    assert "NoArgsIsHelpError" not in result.stderr
    assert "error:" not in result.stderr


def test_usage_error_names_the_option(tmp_path: Path, cli_env: dict[str, str]) -> None:
    result = forager(tmp_path, cli_env, "worker", "--concurrency", "0")
    assert result.returncode != 0
    assert "--concurrency" in result.stderr  # today: "error: BadParameter: Input should be …"
    assert "BadParameter" not in result.stderr


# --------------------------------------------------------------------------- db upgrade


def test_db_upgrade_creates_sqlite_database(tmp_path: Path, cli_env: dict[str, str]) -> None:
    database = tmp_path / "data" / "forager.db"
    first = forager(tmp_path, cli_env, "db", "upgrade")
    assert first.returncode == 0, first.stderr
    assert database.is_file()
    head = head_revision()
    assert head is not None
    assert f"revision {head}" in first.stdout
    assert str(database) in first.stdout
    with contextlib.closing(sqlite3.connect(database)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"crawl_tasks", "products", "domains"} <= tables

    again = forager(tmp_path, cli_env, "db", "upgrade")
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout


def test_db_upgrade_on_postgresql(
    tmp_path: Path, cli_env: dict[str, str], pg_database: str
) -> None:
    cli_env["FORAGER_DATABASE_URL"] = (
        pg_database  # a database at head already: upgrading is a no-op
    )
    result = forager(tmp_path, cli_env, "db", "upgrade")
    assert result.returncode == 0, result.stderr
    assert f"revision {head_revision()}" in result.stdout
    assert pg_database.rpartition("/")[2] in result.stdout
    assert "postgres@" not in result.stdout  # the user part of the URL is never printed
    assert not (tmp_path / "data" / "forager.db").exists()


# --------------------------------------------------------------------------- parse


def test_parse_prints_the_product_record(tmp_path: Path, cli_env: dict[str, str]) -> None:
    page = tmp_path / "shoe.html"
    page.write_text(PRODUCT_PAGE, encoding="utf-8")
    url = "https://shop.example.com/p/trail-shoe"
    result = forager(tmp_path, cli_env, "parse", str(page), "--parser", "generic", "--url", url)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["product_name"] == "Trail Shoe"
    assert (record["price"], record["currency"]) == ("19.99", "EUR")
    assert (record["url"], record["sku"], record["brand"]) == (url, "TS-42", "Acme")
    assert record["is_available"] is True
    assert record["image_urls"] == [
        "https://shop.example.com/img/ts-1.jpg",
        "https://shop.example.com/img/ts-2.jpg",
    ]
    assert (record["parser_name"], record["parser_version"]) == ("generic", "5")
    assert record["original_price"] is None and record["asin"] is None
    assert not (tmp_path / "data").exists()  # parsing needs no database


def test_parse_robot_check_is_one_error_line(tmp_path: Path, cli_env: dict[str, str]) -> None:
    page = tmp_path / "captcha.html"
    page.write_text(ROBOT_CHECK_PAGE, encoding="utf-8")
    args = ["parse", str(page), "--parser", "amazon", "--url", "https://www.amazon.com/dp/B0X"]
    result = forager(tmp_path, cli_env, *args)
    line = one_error_line(result)
    assert "robot check" in line and "CAPTCHA" in line
    assert result.stdout == ""

    debug = forager_process(tmp_path, cli_env, "--debug", *args)  # the interpreter's traceback
    assert debug.returncode != 0
    assert "Traceback (most recent call last)" in debug.stderr
    assert "CaptchaPage" in debug.stderr


def test_parse_with_unknown_parser_lists_the_known_ones(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    page = tmp_path / "shoe.html"
    page.write_text(PRODUCT_PAGE, encoding="utf-8")
    line = one_error_line(forager(tmp_path, cli_env, "parse", str(page), "--parser", "shopify"))
    assert "unknown parser 'shopify'" in line
    assert "amazon" in line and "generic" in line


# --------------------------------------------------------------------------- crawl


def test_crawl_writes_products_as_jsonl(
    tmp_path: Path, cli_env: dict[str, str], site: TestSite
) -> None:
    urls = [site.url("/product/5"), site.url("/product/6", host="127.0.0.2")]
    result = forager(tmp_path, cli_env, "crawl", *urls, "-o", "out.jsonl")
    assert result.returncode == 0, result.stderr
    lines = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["url"])
    assert [r["url"] for r in records] == urls
    assert [(r["product_name"], r["price"], r["currency"]) for r in records] == [
        ("Test Product 5", "5.99", "USD"),
        ("Test Product 6", "6.99", "USD"),
    ]
    assert records[0]["image_urls"] == [site.url("/img/5-1.jpg"), site.url("/img/5-2.jpg")]
    assert {(r["parser_name"], r["parser_version"]) for r in records} == {("generic", "5")}
    assert set(records[0]) >= {"description", "original_price", "rating", "availability", "asin"}
    assert "Test Product 5" in result.stdout  # the table
    assert "2 products, 0 failed, of 2 URLs" in result.stderr
    assert not (tmp_path / "data").exists()  # a throwaway database, not the data dir


def test_crawl_ends_once_its_last_task_is_written(
    tmp_path: Path, cli_env: dict[str, str], site: TestSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crawl's loop wakes when the pool has ended every task, not at its next look at the
    progress: ten minutes here, past the test's own timeout."""
    monkeypatch.setattr(oneshot, "PROGRESS_SECONDS", 600.0)
    urls = [site.url("/product/5"), site.url("/product/6")]
    result = forager(tmp_path, cli_env, "crawl", *urls)
    assert result.returncode == 0, result.stderr
    assert "2 products, 0 failed, of 2 URLs" in result.stderr


def test_crawl_reads_every_domain_with_a_given_selector_map(
    tmp_path: Path, cli_env: dict[str, str], site: TestSite
) -> None:
    """`--selectors` reads every page of every domain with the map: its fields only (no
    generic parser behind a map with ``"fallback": false``), tagged as the selector parser."""
    selector_map = {
        "product_name": {"css": "h1"},
        "price": {"jsonld": "Product:offers.price", "post": ["price"]},
        "sku": {"jsonld": "Product:sku"},
        "fallback": False,
    }
    (tmp_path / "map.json").write_text(json.dumps(selector_map), encoding="utf-8")
    urls = [site.url("/product/5"), site.url("/product/6", host="127.0.0.2")]
    result = forager(tmp_path, cli_env, "crawl", "--selectors", "map.json", *urls, "-o", "o.jsonl")
    assert result.returncode == 0, result.stderr
    lines = (tmp_path / "o.jsonl").read_text(encoding="utf-8").splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["url"])
    assert [(r["product_name"], r["price"], r["sku"]) for r in records] == [
        ("Test Product 5", "5.99", "SKU-5"),
        ("Test Product 6", "6.99", "SKU-6"),
    ]
    assert {(r["parser_name"], r["parser_version"]) for r in records} == {("selector", "1")}
    # The generic parser reads these from the same pages; the map leaves them empty.
    assert [(r["description"], r["image_urls"]) for r in records] == [(None, [])] * 2


@pytest.mark.parametrize(
    ("content", "options", "says"),
    [
        ('{"product_name": {"css": "h1", "post": ["shout"]}}', [], "product_name.post.0"),
        ('{"product_name": ', [], "not JSON"),
        (None, [], "cannot read it"),
        ('{"product_name": {"css": "h1"}}', ["--parser", "generic"], "give one"),
    ],
)
def test_crawl_refuses_a_bad_selector_map_before_fetching_anything(
    tmp_path: Path,
    cli_env: dict[str, str],
    site: TestSite,
    content: str | None,
    options: list[str],
    says: str,
) -> None:
    if content is not None:
        (tmp_path / "map.json").write_text(content, encoding="utf-8")
    args = ["crawl", "--selectors", "map.json", *options, site.url("/product/5")]
    line = one_error_line(forager(tmp_path, cli_env, *args))
    assert says in line and "Traceback" not in line
    assert not [r for r in site.requests() if r.path.startswith("/product/")]


def test_crawl_fetches_with_the_fetcher_it_is_given(
    tmp_path: Path, cli_env: dict[str, str], site: TestSite
) -> None:
    """A page whose price only its script writes: read without it by the default fetcher,
    with it by `--fetcher browser` (Chromium); a fetcher that does not exist is refused."""
    if not CHROMIUM.exists():
        service_missing("Chromium", f"{CHROMIUM} not found")
    url = site.url("/js-price/7")

    def crawled(*options: str) -> tuple[list[Any], str]:
        result = forager(tmp_path, cli_env, "crawl", *options, url, "-o", "o.jsonl")
        lines = (tmp_path / "o.jsonl").read_text(encoding="utf-8").splitlines()
        return [json.loads(line)["price"] for line in lines], result.stderr

    prices, said = crawled()  # "Loading price..." is all the HTML says
    assert prices == [] and "0 products, 1 failed" in said, said
    prices, said = crawled("--fetcher", "browser")
    assert prices == ["7.99"] and "1 products, 0 failed" in said, said
    line = one_error_line(forager(tmp_path, cli_env, "crawl", "--fetcher", "chrome", url))
    assert "--fetcher 'chrome': one of http, impersonate, browser, auto" in line


def test_crawl_starts_from_the_schema_the_first_crawl_kept(
    tmp_path: Path, cli_env: dict[str, str], site: TestSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first crawl keeps its freshly migrated database as a template; the next copies it
    instead of migrating; a template of other migrations is not used; no cache, no harm."""
    url = site.url("/product/5")
    cache = Path(cli_env["XDG_CACHE_HOME"]) / "forager"
    assert forager(tmp_path, cli_env, "crawl", url).returncode == 0
    [kept] = cache.glob("sqlite-schema-*.db")
    with contextlib.closing(sqlite3.connect(kept)) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (head_revision(),)
        ]
        assert conn.execute("SELECT count(*) FROM crawl_tasks").fetchone() == (0,)
        conn.execute("CREATE TABLE template_mark (x INTEGER)")  # seen only in a copy
        conn.commit()
    marked: list[bool] = []
    crawl = oneshot._crawl

    async def spy(runtime: Any, *args: Any) -> int:
        async with runtime.db.reader() as session:
            found = await session.scalar(
                text("SELECT count(*) FROM sqlite_master WHERE name = 'template_mark'")
            )
        marked.append(bool(found))
        return await crawl(runtime, *args)

    monkeypatch.setattr(oneshot, "_crawl", spy)
    second = forager(tmp_path, cli_env, "crawl", url, "-o", "out.jsonl")
    assert second.returncode == 0, second.stderr
    assert marked == [True]
    assert json.loads((tmp_path / "out.jsonl").read_text())["price"] == "5.99"
    # New migrations (or a new release): a template of its own, migrated afresh.
    monkeypatch.setattr(template, "fingerprint", lambda: "0123456789abcdef")
    assert forager(tmp_path, cli_env, "crawl", url).returncode == 0
    assert marked == [True, False]
    assert len(list(cache.glob("sqlite-schema-*.db"))) == 2
    # A cache directory that cannot be made: the crawl migrates and runs all the same.
    cli_env["XDG_CACHE_HOME"] = str(kept)  # a file, not a directory
    assert forager(tmp_path, cli_env, "crawl", url).returncode == 0
    assert marked == [True, False, False]


def test_crawl_reports_a_failed_url_and_exits_1(
    tmp_path: Path, cli_env: dict[str, str], site: TestSite
) -> None:
    good, gone = site.url("/product/5"), site.url("/status/404")
    result = forager(tmp_path, cli_env, "crawl", good, gone, "-o", "out.jsonl")
    assert result.returncode == 1, result.stderr
    assert f"failed {gone}" in result.stderr
    assert "http_4xx" in result.stderr
    assert "1 products, 1 failed, of 2 URLs" in result.stderr
    [line] = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["url"] == good


def test_crawl_of_an_invalid_url_says_why(tmp_path: Path, cli_env: dict[str, str]) -> None:
    result = forager(tmp_path, cli_env, "crawl", "ftp://shop.example.com/p/1")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "ftp://shop.example.com/p/1" in result.stderr
    assert "not crawlable" in result.stderr


# --------------------------------------------------------------------------- refusals


def test_bad_configuration_is_one_line(tmp_path: Path, cli_env: dict[str, str]) -> None:
    cli_env["FORAGER_LOG_LEVEL"] = "LOUD"
    line = one_error_line(forager(tmp_path, cli_env, "db", "upgrade"))
    assert "FORAGER_LOG_LEVEL" in line or "log_level" in line
    assert not (tmp_path / "data").exists()


def test_crawl_that_fails_to_start_leaves_the_collector_on(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """`crawl` starts with the cyclic collector off; a start that fails turns it back on for
    whoever called it in-process."""
    cli_env["FORAGER_LOG_LEVEL"] = "LOUD"
    line = one_error_line(forager(tmp_path, cli_env, "crawl", "https://shop.example.com/p/1"))
    assert "FORAGER_LOG_LEVEL" in line or "log_level" in line
    assert gc.isenabled()


def test_serve_refuses_to_bind_a_public_address(tmp_path: Path, cli_env: dict[str, str]) -> None:
    line = one_error_line(forager(tmp_path, cli_env, "serve", "--host", "0.0.0.0"))
    assert "refusing to bind 0.0.0.0" in line
    assert "forager apikey create" in line


# --------------------------------------------------------------------------- worker


async def _submit(data_dir: Path, database_url: str, url: str) -> int:
    """Submit ``url`` in-process, into the database the worker subprocess will use."""
    settings = load_settings(
        data_dir=data_dir, database_url=database_url, default_crawl_delay_seconds=0
    )
    db = await open_database(settings)
    try:
        [outcome] = await submit_urls(db, settings, [SubmitSpec(url)])
    finally:
        await db.dispose()
    assert outcome.task_id is not None, outcome.error
    return outcome.task_id


async def test_worker_crawls_then_stops_on_sigterm(
    tmp_path: Path, cli_env: dict[str, str], site: TestSite
) -> None:
    database = tmp_path / "queue.db"
    database_url = f"sqlite+aiosqlite:///{database}"
    task_id = await _submit(tmp_path / "data", database_url, site.url("/product/9"))
    cli_env.update(FORAGER_DATABASE_URL=database_url, FORAGER_POLL_SECONDS="0.1")
    log = tmp_path / "worker.log"
    with log.open("w") as output:
        worker = subprocess.Popen(
            [sys.executable, "-m", "forager.cli", "worker", "--concurrency", "2"],
            cwd=tmp_path,
            env=cli_env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )

    def settled() -> str | None:
        assert worker.poll() is None, log.read_text()
        with contextlib.closing(sqlite3.connect(database)) as conn:
            [status] = conn.execute(
                "SELECT status FROM crawl_tasks WHERE id = ?", (task_id,)
            ).fetchone()
        return status if status in ("completed", "failed") else None

    try:
        status = await eventually(settled, "the task to settle", context=log.read_text)
        assert status == "completed", log.read_text()
        worker.send_signal(signal.SIGTERM)
        returncode = worker.wait(timeout=15)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert returncode == 0, log.read_text()
    assert "Traceback" not in log.read_text()
    with contextlib.closing(sqlite3.connect(database)) as conn:
        [name] = conn.execute("SELECT product_name FROM products").fetchone()
    assert name == "Test Product 9"
