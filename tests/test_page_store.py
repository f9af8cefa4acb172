"""The page store's contract, run over both backends (a directory and a real S3 server,
SeaweedFS), and what S3 adds: signed requests, a missing bucket, a wrong key, a server that
goes away mid-write — each a clear error, and no page recorded as stored."""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import func, select

from forager.config import load_settings
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, CrawlTask
from forager.errors import ConfigError, PageStoreError
from forager.runtime import Runtime
from forager.store import packs
from forager.store.backend import open_page_store
from forager.store.pages import LocalPageStore, PageStore, image_key
from forager.store.s3 import S3PageStore
from tests.conftest import SettingsFactory
from tests.support.crawling import crawl, submit
from tests.support.seaweed import ACCESS_KEY, REGION, SECRET_KEY, SeaweedS3
from tests.support.site import TestSite

HASH = "ab" + "0" * 62


@pytest.fixture
async def store(page_store_settings: dict[str, Any], tmp_path: Path) -> AsyncIterator[PageStore]:
    pages = open_page_store(load_settings(data_dir=tmp_path / "data", **page_store_settings))
    await pages.check()
    yield pages
    await pages.aclose()


async def test_put_get_exists_delete(store: PageStore) -> None:
    body = "<html><p>prix: 12,50 €</p></html>".encode() * 50
    key = await store.put(HASH, body)
    if isinstance(store, LocalPageStore):
        assert packs.parse_key(key)[2] < len(body)  # appended to a pack, gzipped
    else:
        assert key.startswith(f"ab/{HASH}-") and key.endswith(".html.gz")
    assert await store.get(key) == body
    assert await store.exists(key)
    again = await store.put_gzip(HASH, gzip.compress(b"<html>two</html>"))
    assert again != key and await store.get(again) == b"<html>two</html>"
    big = os.urandom(300_000)  # past the local store's inline write
    assert await store.get(await store.put(HASH, big)) == big
    await store.delete(key)
    assert not await store.exists(key)
    await store.delete(key)  # deleting a page already gone is not an error
    with pytest.raises(PageStoreError, match="cannot read stored page"):
        await store.get(key)
    assert await store.get(again) == b"<html>two</html>"  # the others stay


async def test_blobs_are_stored_as_they_are(store: PageStore) -> None:
    """Product images: raw bytes under the key given; the same key twice holds them once."""
    data = os.urandom(70_000)
    key = image_key("cd" + "1" * 62, "png")
    assert key == f"images/cd/cd{'1' * 62}.png"
    await store.put_blob(key, data, "image/png")
    await asyncio.gather(*(store.put_blob(key, data, "image/png") for _ in range(3)))
    assert await store.get_blob(key) == data
    assert await store.exists(key)
    with pytest.raises(PageStoreError):
        await store.get_blob(image_key("ef" + "2" * 62, "jpg"))
    with pytest.raises(PageStoreError):
        await store.put_blob("../../outside.png", data, "image/png")


async def test_keys_outside_the_store_are_refused(store: PageStore) -> None:
    for key in ("../../etc/passwd", "/etc/passwd", "packs/../../etc/passwd@0+10"):
        with pytest.raises(PageStoreError):
            await store.get(key)


async def test_crawled_page_lands_in_the_configured_store(
    make_settings: SettingsFactory, page_store_settings: dict[str, Any], site: TestSite
) -> None:
    settings = make_settings(**page_store_settings)
    runtime = await Runtime.open(settings)
    try:
        [task_id] = await submit(runtime.db, settings, site.url("/product/7"))
        task = (await crawl(runtime.db, settings, [task_id], parts=runtime.parts))[task_id]
        assert task.status == "completed", task.error_message
        assert task.html_path is not None
        assert b"Test Product 7" in await runtime.pages.get(task.html_path)
    finally:
        await runtime.aclose()
    if settings.s3_bucket is not None:
        assert not (settings.data_dir / "pages").exists()  # nothing went to the disk instead


async def test_a_page_the_parse_process_cannot_store_is_not_recorded(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    # A local store's pages are written by the parse process; where that write fails the task
    # fails as it does when a store refuses a page, and no attempt points at a file.
    settings = make_settings(max_retries=0)
    [task_id] = await submit(db, settings, site.url("/product/4"))
    blocker = settings.pages_dir / "packs"  # a file where the packs' directory goes
    blocker.parent.mkdir(parents=True)
    blocker.write_bytes(b"")
    task = (await crawl(db, settings, [task_id]))[task_id]
    await _failed_with_no_page(db, task)
    assert blocker.read_bytes() == b""


async def _failed_with_no_page(db: Database, task: CrawlTask) -> None:
    """``task`` failed because its page could not be stored, and no attempt points at one."""
    assert (task.status, task.error_type) == ("failed", "internal")
    assert (task.error_message or "").startswith("page not stored: cannot store page")
    assert task.html_path is None
    async with db.reader() as session:
        stored = await session.scalar(
            select(func.count()).where(CrawlAttempt.page_path.is_not(None))
        )
    assert stored == 0


# -- S3 only ------------------------------------------------------------------------------------


def _s3(server: SeaweedS3, place: str, secret: str = SECRET_KEY) -> S3PageStore:
    bucket, _, prefix = place.partition("/")
    return S3PageStore(
        server.endpoint,
        bucket,
        prefix,
        region=REGION,
        access_key_id=ACCESS_KEY,
        secret_access_key=SecretStr(secret),
        timeout=5,
    )


async def test_wrong_key_is_refused_without_showing_it(s3_server: SeaweedS3) -> None:
    place = s3_server.place()
    store = _s3(s3_server, place, secret="not-the-secret-X1")
    try:
        for attempt in (store.check(), store.put(HASH, b"<html></html>")):
            with pytest.raises(PageStoreError, match="S3 refused the request") as caught:
                await attempt
            assert "SignatureDoesNotMatch" in caught.value.message
            assert "not-the-secret-X1" not in caught.value.message
        assert "not-the-secret-X1" not in repr(store)
    finally:
        await store.aclose()
    assert s3_server.objects(place) == []


async def test_missing_bucket_stops_start_up(
    s3_server: SeaweedS3, make_settings: SettingsFactory
) -> None:
    store = _s3(s3_server, "no-such-bucket-here/pages")
    try:
        with pytest.raises(PageStoreError, match="'no-such-bucket-here' does not exist"):
            await store.check()
    finally:
        await store.aclose()
    settings = make_settings(
        page_store="s3://no-such-bucket-here/pages",
        s3_endpoint_url=s3_server.endpoint,
        s3_access_key_id=ACCESS_KEY,
        s3_secret_access_key=SECRET_KEY,
    )
    with pytest.raises(PageStoreError, match="does not exist"):
        await Runtime.open(settings)


class _DroppingServer:
    """A loopback "S3" that reads the request head and a little of the body, then hangs up:
    the server going away in the middle of a page's upload."""

    def __init__(self) -> None:
        self.requests = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests += 1
        await reader.readuntil(b"\r\n\r\n")
        await reader.read(10)
        writer.transport.abort()  # RST: gone, not a polite close

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


async def test_server_gone_mid_write_records_no_page(
    db: Database, make_settings: SettingsFactory, site: TestSite, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(max_retries=0)
    dropping = _DroppingServer()
    async with dropping as endpoint:
        store = S3PageStore(
            endpoint,
            "pages",
            "",
            region=REGION,
            access_key_id=ACCESS_KEY,
            secret_access_key=SecretStr(SECRET_KEY),
            timeout=5,
        )
        with pytest.raises(PageStoreError, match=r"cannot store page .*S3 endpoint .* failed"):
            await store.put_gzip(HASH, os.urandom(200_000))
        [task_id] = await submit(db, settings, site.url("/product/3"))
        with caplog.at_level(logging.INFO):
            task = (await crawl(db, settings, [task_id], pages=store))[task_id]
        await store.aclose()
    assert dropping.requests >= 2
    await _failed_with_no_page(db, task)
    assert SECRET_KEY not in caplog.text


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"page_store": "s3://Bad_Bucket/x"}, "FORAGER_PAGE_STORE must be empty or s3://"),
        ({"page_store": "/var/pages"}, "FORAGER_PAGE_STORE must be empty or s3://"),
        ({"page_store": "s3://pages/x"}, "needs FORAGER_S3_ACCESS_KEY_ID"),
        (
            {
                "page_store": "s3://pages",
                "s3_access_key_id": "k",
                "s3_secret_access_key": "s",
                "s3_endpoint_url": "ftp://x",
            },
            "FORAGER_S3_ENDPOINT_URL must be",
        ),
    ],
)
def test_bad_s3_settings_are_refused(
    overrides: dict[str, str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(data_dir=tmp_path, **overrides)


def test_s3_settings_resolve(tmp_path: Path) -> None:
    settings = load_settings(
        data_dir=tmp_path,
        page_store="s3://forager-pages/prod/raw/",
        s3_access_key_id="k",
        s3_secret_access_key="secret-v4lue",
        s3_region="eu-west-3",
    )
    assert settings.s3_bucket == ("forager-pages", "prod/raw")
    assert settings.s3_endpoint == "https://s3.eu-west-3.amazonaws.com"
    assert "secret-v4lue" not in repr(settings)
