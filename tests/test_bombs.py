"""Decompression bombs against every fetcher: a body is bounded after decompression on every hop.

Each bomb decodes to 512 MiB; the limit is 2 MiB. A fetch must end as the table says *and* the
process's peak memory must not grow by more than a few times the limit — a client that decoded
a redirect's body, an error page or robots.txt with an unbounded decoder grows by the bomb.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Domain
from forager.domains.robots import ROBOTS_MAX_BYTES
from forager.errors import FetchError
from forager.fetch.base import FetchRequest, FetchResponse
from forager.fetch.fetcher_set import build_fetcher
from tests.conftest import SettingsFactory
from tests.support.bombs import BombServer, bomb, peak_growth
from tests.support.crawling import submit
from tests.support.fetching import KINDS, fetch_settings, refresh_robots_now, require
from tests.support.proxy import TestProxy

LIMIT = 2 * 1024 * 1024
GROWTH_MIB = 48  # a generous bound on what a 2 MiB body costs; a bomb costs 512 MiB
UA = "forager-bomb-test/1"

# (bomb URL path, what the fetch must end in: "ok" (the redirect was followed) or an error type)
CASES = {
    "302-stacked-gzip": ("/bomb?enc=gzip,gzip&status=302&to=/ok", "ok"),
    "302-brotli": ("/bomb?enc=br&status=302&to=/ok", "ok"),
    "302-zstd": ("/bomb?enc=zstd&status=302&to=/ok", "ok"),
    "200-stacked-gzip": ("/bomb?enc=gzip,gzip", "too_large"),
    "200-brotli": ("/bomb?enc=br", "too_large"),
    "200-zstd": ("/bomb?enc=zstd", "too_large"),
    "404-stacked-gzip": ("/bomb?enc=gzip,gzip&status=404", "http_4xx"),
    "503-brotli": ("/bomb?enc=br&status=503", "http_5xx"),
}


@pytest.fixture(scope="module")
def bombs() -> Iterator[BombServer]:
    for encodings in (("gzip", "gzip"), ("br",), ("zstd",)):
        bomb(encodings, 512)  # built before any measurement
    bomb(("gzip", "gzip"), 512, b"# bomb\n")
    with BombServer() as server:
        yield server


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return require(request.param)


def _settings(tmp_path: Path) -> Settings:
    return fetch_settings(tmp_path, max_body_bytes=LIMIT, fetch_timeout_seconds=20.0)


def _outcome(result: FetchResponse | BaseException) -> str:
    if isinstance(result, FetchError):
        return result.error_type
    if isinstance(result, BaseException):
        raise result
    assert b"bomb-free" in result.body, result.body[:200]
    return "ok"


@pytest.mark.parametrize("via", ["direct", "proxy"])
@pytest.mark.parametrize("case", list(CASES))
async def test_a_bomb_costs_at_most_the_limit(
    kind: str, case: str, via: str, bombs: BombServer, tmp_path: Path
) -> None:
    path, expected = CASES[case]
    fetcher = build_fetcher(kind, _settings(tmp_path))
    try:
        with TestProxy() as proxy:
            # A first page starts the fetcher (Chromium, its gateway) outside the measurement.
            await fetcher.fetch(FetchRequest(bombs.url("/ok"), UA))
            proxy_url = proxy.url if via == "proxy" else None
            request = FetchRequest(bombs.url(path), UA, proxy_url)
            result, grew = await peak_growth(fetcher.fetch(request))
            if via == "proxy":
                assert any("/bomb" in r for r in proxy.requests), proxy.requests
    finally:
        await fetcher.aclose()
    assert _outcome(result) == expected
    assert grew < GROWTH_MIB, f"{case} via {via}: peak memory grew by {grew} MiB"


@pytest.mark.parametrize("fetcher_kind", ["http", "impersonate"])
async def test_a_robots_txt_bomb_is_cut_at_its_size_limit(
    db: Database,
    make_settings: SettingsFactory,
    bombs: BombServer,
    fetcher_kind: str,
) -> None:
    settings = make_settings(max_body_bytes=LIMIT)
    await submit(db, settings, bombs.url("/ok"))
    async with db.session() as session:
        domain = await session.scalar(select(Domain))
        assert domain is not None
        domain.base_url, domain.fetcher = bombs.url("").rstrip("/"), fetcher_kind
        domain_id = domain.id
    (refreshed, error), grew = await peak_growth(refresh_robots_now(db, settings, domain_id))
    assert error is None
    assert grew < GROWTH_MIB, f"robots.txt bomb: peak memory grew by {grew} MiB"
    text = refreshed.robots_txt_content or ""
    assert 0 < len(text) <= ROBOTS_MAX_BYTES and text.endswith("# bomb")
    assert "/robots.txt" in bombs.paths
