"""`forager parse`: the record with its data quality, or one line saying what the page is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forager.parse.accuracy import PAGES, load_truth


def _parse(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORAGER_")}
    env.update(FORAGER_DATA_DIR=str(tmp_path / "data"), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "forager.cli", "parse", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _page(tmp_path: Path, html: str) -> str:
    path = tmp_path / "page.html"
    path.write_text(html, encoding="utf-8")
    return str(path)


def test_a_page_without_product_data_is_one_error_line(tmp_path: Path) -> None:
    page = _page(tmp_path, "<html><head><title>About us</title></head><body>Hi</body></html>")
    result = _parse(tmp_path, page, "--url", "https://shop.example/about")
    assert result.returncode != 0
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a product page" in lines[0], result.stderr


def test_an_amazon_search_page_says_so(tmp_path: Path) -> None:
    page = _page(tmp_path, '<html><body><div class="s-result-list">x</div></body></html>')
    result = _parse(tmp_path, page, "--url", "https://www.amazon.com.br/s?k=cafeteira")
    assert result.returncode != 0
    assert "Amazon search results page" in result.stderr


def test_the_record_carries_confidence_and_kept_violations(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """<html><head><script type="application/ld+json">
        {"@type": "Product", "name": "Desk Lamp", "offers": {"price": "-3.00",
         "priceCurrency": "EUR"}}</script></head><body><h1>Desk Lamp</h1></body></html>""",
    )
    result = _parse(tmp_path, page, "--url", "https://shop.example/p/lamp")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["price"] == "-3.00"  # as extracted, not "fixed"
    assert record["quality_issues"] == ["price -3.00 is not positive"]
    assert record["field_confidence"]["product_name"] == 0.95
    assert record["parser_name"] == "generic"


@pytest.mark.skipif(not load_truth(), reason=f"real pages not found at {PAGES}")
def test_a_real_amazon_page_picks_the_amazon_parser_from_the_url(tmp_path: Path) -> None:
    entry = next(e for e in load_truth() if e["site"] == "amazon.com.br")
    result = _parse(tmp_path, str(PAGES / entry["file"]), "--url", entry["source_url"])
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["parser_name"] == "amazon"
    assert record["asin"] == entry["sku"]
    assert record["currency"] == "BRL"
    assert record["quality_issues"] == []
