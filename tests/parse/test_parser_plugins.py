"""Parser plugins (issue 17): entry points of ``forager.parsers`` found through importlib.metadata,
broken ones reported with their name and error, and the example package installed for real."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from forager.parse import plugins, registry
from tests.support.cli import clean_env, forager, forager_process

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "forager-example-parser"
BOOK_URL = "https://books.toscrape.com/catalogue/a-light-in-the-attic_1000/index.html"

# A package of plugins, good and bad: name -> (entry point value, module source).
_MODULE = """
from forager.parse.base import ProductRecord

class Good:
    name = "good-shop"
    version = "3"
    hosts = ("good.example", "*.good-shop.test")

    def parse(self, html, url):
        return ProductRecord(url=url, product_name="good", parser_name=self.name,
                             parser_version=self.version)

class Exploding:
    def __init__(self):
        raise RuntimeError("no licence key")

NOT_A_PARSER = 42

class Misnamed(Good):
    name = "other-name"

class BadHosts(Good):
    name = "bad-hosts"
    hosts = "good.example"
"""
_POINTS = {
    "good-shop": "fakeplugins:Good",
    "exploding": "fakeplugins:Exploding",
    "not-a-parser": "fakeplugins:NOT_A_PARSER",
    "missing": "fakeplugins_gone.module:Parser",
    "misnamed": "fakeplugins:Misnamed",
    "bad-hosts": "fakeplugins:BadHosts",
    "amazon": "fakeplugins:Good",
}


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A distribution ``fake-plugins 1.2`` on sys.path, as an installer leaves it; the registry
    is found afresh with it and again without it afterwards."""
    (tmp_path / "fakeplugins.py").write_text(_MODULE, encoding="utf-8")
    info = tmp_path / "fake_plugins-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugins\nVersion: 1.2\n")
    lines = "".join(f"{name} = {value}\n" for name, value in _POINTS.items())
    (info / "entry_points.txt").write_text(f"[forager.parsers]\n{lines}")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._registry.cache_clear()
    try:
        yield tmp_path
    finally:
        sys.modules.pop("fakeplugins", None)
        registry._registry.cache_clear()


def _by_name(entries: list[plugins.ParserEntry]) -> dict[str, list[plugins.ParserEntry]]:
    found: dict[str, list[plugins.ParserEntry]] = {}
    for entry in entries:
        found.setdefault(entry.name, []).append(entry)
    return found


def test_plugins_are_found_and_broken_ones_reported_not_fatal(
    installed: Path, caplog: pytest.LogCaptureFixture
) -> None:
    found = _by_name(registry.entries())
    [good] = found["good-shop"]
    assert (good.origin, good.dist, good.dist_version, good.version) == (
        "plugin",
        "fake-plugins",
        "1.2",
        "3",
    )
    assert registry.get_parser("good-shop").parse("<p>", "https://good.example/").parser_version
    errors = {name: found[name][0].error or "" for name in _POINTS if name != "good-shop"}
    assert errors["exploding"] == "RuntimeError: no licence key"
    assert errors["not-a-parser"].startswith("not a parser: it gives an object of type int")
    assert "ModuleNotFoundError" in errors["missing"]
    assert "named 'misnamed' but the parser 'other-name'" in errors["misnamed"]
    assert "must be a tuple of host patterns" in errors["bad-hosts"]
    # A plugin cannot take a built-in's name: the built-in stays, the plugin is reported.
    builtin, taken = found["amazon"]
    assert (builtin.origin, builtin.parser is not None) == ("builtin", True)
    assert taken.dist == "fake-plugins" and "already taken" in (taken.error or "")
    assert registry.get_parser("amazon").name == "amazon"
    # Broken parsers are not usable names; each was logged with its package.
    assert "exploding" not in registry.parser_names()
    with pytest.raises(registry.UnknownParser, match="'exploding' is broken: RuntimeError"):
        registry.get_parser("exploding")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "parser exploding (from fake-plugins 1.2) is broken" in logged


def test_hosts_claimed_by_plugins_choose_the_default_parser(installed: Path) -> None:
    assert registry.parser_name_for_host("good.example") == "good-shop"
    assert registry.parser_name_for_host("www.good.example") == "good-shop"
    assert registry.parser_name_for_host("eu.good-shop.test") == "good-shop"
    assert registry.parser_name_for_host("good-shop.test") == "generic"  # "*" is one label
    assert registry.parser_name_for_host("notgood.example") == "generic"
    assert registry.parser_name_for_host("smile.amazon.co.uk") == "amazon"
    assert registry.parser_name_for_host("amazon.evil.com") == "generic"


def test_parsers_list_shows_origins_and_errors(installed: Path, tmp_path: Path) -> None:
    ran = forager(tmp_path, clean_env(tmp_path / "data"), "parsers", "list")
    assert ran.returncode == 0, ran.stderr
    lines: dict[str, str] = {}
    for line in ran.stdout.splitlines():
        lines.setdefault(line.split()[0], line)  # the parser in use before a broken namesake
    assert lines["amazon"].split()[1:3] == ["v2", "builtin"]
    assert "plugin fake-plugins 1.2  hosts: good.example, *.good-shop.test" in lines["good-shop"]
    assert "BROKEN" in lines["exploding"] and "RuntimeError: no licence key" in lines["exploding"]
    assert "broken parsers are not used" in ran.stderr


async def test_api_lists_parsers_with_their_errors(installed: Path, api: httpx.AsyncClient) -> None:
    response = await api.get("/api/parsers")
    assert response.status_code == 200, response.text
    items = {(i["name"], i["origin"], i["ok"]): i for i in response.json()["items"]}
    good = items[("good-shop", "plugin", True)]
    assert (good["dist"], good["dist_version"], good["version"]) == ("fake-plugins", "1.2", "3")
    broken = items[("missing", "plugin", False)]
    assert broken["version"] is None and "ModuleNotFoundError" in broken["error"]
    assert items[("generic", "builtin", True)]["hosts"] == []


def _uv() -> list[str]:
    if found := shutil.which("uv"):
        return [found]
    return ["python3", "-m", "uv"]  # how the Makefile's bootstrap installs it


@pytest.fixture(scope="module")
def example_installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package built and installed (its wheel, entry point and all) into a
    target folder of its own — the plugin's dependency, Forager, is this checkout."""
    target = tmp_path_factory.mktemp("example-parser")
    command = [*_uv(), "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
    subprocess.run([*command, "--python", sys.executable, str(EXAMPLE)], check=True, timeout=120)
    return target


@pytest.fixture
def book_site(tmp_path: Path) -> Iterator[str]:
    """A loopback HTTP server serving the example's saved book page."""
    shutil.copy(EXAMPLE / "tests" / "book.html", tmp_path / "book.html")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/book.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_example_package_installed_is_listed_claims_its_host_and_parses(
    example_installed: Path, book_site: str, tmp_path: Path
) -> None:
    env = clean_env(tmp_path / "data")
    env["PYTHONPATH"] = str(example_installed)
    listed = forager_process(tmp_path, env, "parsers", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    example = next(json.loads(line) for line in listed.stdout.splitlines() if "example" in line)
    assert example == {
        "name": "example-books",
        "version": "1",
        "origin": "plugin",
        "reference": "forager_example_parser:BooksParser",
        "dist": "forager-example-parser",
        "dist_version": "0.1.0",
        "hosts": ["books.toscrape.com"],
        "error": None,
    }
    # The host it claims picks it (no --parser given) ...
    page = EXAMPLE / "tests" / "book.html"
    parsed = forager_process(tmp_path, env, "parse", str(page), "--url", BOOK_URL)
    assert parsed.returncode == 0, parsed.stderr
    record = json.loads(parsed.stdout)
    assert (record["parser_name"], record["price"], record["currency"]) == (
        "example-books",
        "51.77",
        "GBP",
    )
    # ... and a crawl of a loopback page parses it in Forager's parse processes.
    out = tmp_path / "products.jsonl"
    crawled = forager_process(
        tmp_path, env, "crawl", book_site, "--parser", "example-books", "-o", str(out)
    )
    assert crawled.returncode == 0, (crawled.stdout, crawled.stderr)
    [product] = [json.loads(line) for line in out.read_text().splitlines()]
    assert (product["product_name"], product["sku"]) == ("A Light in the Attic", "a897fe39b1053632")
    assert product["parser_name"] == "example-books"
