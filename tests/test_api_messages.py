"""Refusals read as Forager's own words (issue 34, item 8): no validation library's prefix, a
body that is not JSON named by line and column (not a character offset as a field), and a rule
given to the wrong monitor reader points at the right one."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.cli import forager

PROBLEM = "application/problem+json"
SCHEME = "URL scheme 'htp' is not crawlable (expected http or https)"


def _refusal(response: httpx.Response) -> dict[str, object]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, object] = response.json()
    return body


async def test_a_validator_message_has_no_library_prefix(api: httpx.AsyncClient) -> None:
    body = _refusal(await api.post("/api/tasks", json={"url": "htp://shop.example.com/p/1"}))
    assert body["errors"] == [{"field": "url", "message": SCHEME}]
    assert body["detail"] == f"url: {SCHEME}"
    unknown = _refusal(
        await api.post("/api/tasks", json={"url": "https://s.example/p", "parser_name": "nope"})
    )
    assert str(unknown["detail"]).startswith("parser_name: unknown parser 'nope'")


async def test_malformed_json_is_named_by_line_and_column(api: httpx.AsyncClient) -> None:
    sent = '{\n  "url": "https://shop.example.com/p/1",\n  "priority": 1,,\n}'
    body = _refusal(
        await api.post(
            "/api/tasks", content=sent.encode(), headers={"content-type": "application/json"}
        )
    )
    message = "request body is not valid JSON: Expecting property name enclosed in double quotes"
    assert body["errors"] == [{"field": "body", "message": f"{message} at line 3 column 17"}]
    assert body["detail"] == f"{message} at line 3 column 17"


async def test_css_rules_for_the_json_reader_suggest_the_css_reader(
    api: httpx.AsyncClient,
) -> None:
    rules = {"price": "div.product > span.price", "name": "h1"}
    body = _refusal(
        await api.post(
            "/api/monitors", json={"url": "https://shop.example.com/p/1", "json_paths": rules}
        )
    )
    [error] = body["errors"]  # type: ignore[misc]
    assert error["field"] == "json_paths.price"
    assert "'div.product > span.price' is a CSS selector" in error["message"]
    assert "CSS selectors reader (css instead of json_paths)" in error["message"]
    # A path that is neither keeps the plain wording.
    plain = _refusal(
        await api.post(
            "/api/monitors",
            json={"url": "https://shop.example.com/p/1", "json_paths": {"x": "a..b"}},
        )
    )
    assert plain["errors"][0]["message"].startswith("expected a dotted JSON path")  # type: ignore[index]
    assert "CSS" not in plain["errors"][0]["message"]  # type: ignore[index]


def test_a_json_line_of_forager_submit_has_no_library_prefix(
    tmp_path: Path, cli_env: dict[str, str], db_url: str
) -> None:
    (tmp_path / "urls.txt").write_text('{"url": "htp://shop.example.com/p/1"}\n')
    ran = forager(tmp_path, {**cli_env, "FORAGER_DATABASE_URL": db_url}, "submit", "urls.txt")
    assert ran.returncode == 1
    assert ran.stderr.strip() == f"line 1: url: {SCHEME}"
