"""Product images (issue 18): a domain with ``download_images`` gets its products' images stored
in the page store — both stores, both databases — through the page path's fetch rules, only
real images (header and bytes), under the size and pixel caps, each distinct image once; the
API lists and serves them; retention never deletes them; /metrics counts them."""

from __future__ import annotations

import asyncio
import struct
import zlib
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Domain, Product, ProductImage, Proxy
from forager.db.types import utcnow
from forager.parse.base import ProductRecord
from forager.politeness.gate import open_after, take
from forager.products.imagefile import NotAnImage, inspect
from forager.products.persist import ProductInput, save_products
from forager.runtime import open_database
from forager.store.backend import open_page_store
from forager.store.retention import Retention, prune
from forager.worker.pool import WorkerPool
from tests.conftest import SettingsFactory
from tests.support import pictures
from tests.support.crawling import add_proxy, crawl, submit
from tests.support.proxy import TestProxy
from tests.support.site import TestSite
from tests.support.waiting import eventually

IMAGE_SETTINGS = {"image_max_bytes": 100_000, "image_poll_seconds": 0.05}


async def _download_images(db: Database, domain_name: str) -> None:
    async with db.session() as session:
        await session.execute(
            update(Domain).where(Domain.domain_name == domain_name).values(download_images=True)
        )


async def _images(db: Database) -> dict[str, ProductImage]:
    """Every product image, by the last part of its URL ("photo.png", …)."""
    async with db.reader() as session:
        rows = await session.scalars(select(ProductImage).order_by(ProductImage.id))
        return {row.image_url.rsplit("/", 1)[1]: row for row in rows}


async def _crawl_gallery(
    db: Database, settings: Settings, site: TestSite, n: int, submitted: list[int] | None = None
) -> None:
    """Crawl ``/gallery/n`` with image downloads on, until every image has been tried."""
    [task_id] = submitted or await submit(db, settings, site.url(f"/gallery/{n}"))
    await _download_images(db, "127.0.0.1")
    pool = WorkerPool(db, settings, concurrency=2)
    runner = asyncio.create_task(pool.run())

    async def all_tried() -> bool:
        images = await _images(db)
        return len(images) == len(pictures.GALLERY) + 1 and all(
            row.fetched_at is not None for row in images.values()
        )

    try:
        await eventually(all_tried, "every product image tried once")
    finally:
        pool.stop()
        await runner
    assert task_id


async def test_images_are_stored_once_and_only_real_images(
    make_settings: SettingsFactory, page_store_settings: dict[str, Any], site: TestSite
) -> None:
    settings = make_settings(**IMAGE_SETTINGS, **page_store_settings)
    db = await open_database(settings)
    pages = open_page_store(settings)
    try:
        await _crawl_gallery(db, settings, site, 7)
        images = await _images(db)
        files = pictures.files()
        png, jpg = images["photo.png"], images["snap.jpg"]
        copy = images["photo-copy.png"]
        assert (png.content_type, png.width, png.height) == ("image/png", 40, 30)
        assert (jpg.content_type, jpg.width, jpg.height) == ("image/jpeg", 20, 10)
        assert png.file_size == len(files["photo.png"][0])
        # The same bytes under two URLs: one object, both rows pointing at it.
        assert (copy.content_hash, copy.image_path) == (png.content_hash, png.image_path)
        assert png.image_path == f"images/{png.content_hash[:2]}/{png.content_hash}.png"
        assert await pages.get_blob(png.image_path) == files["photo.png"][0]
        assert jpg.image_path is not None
        assert await pages.get_blob(jpg.image_path) == files["snap.jpg"][0]
        for row in (png, jpg, copy):
            assert (row.error, row.fetch_attempts, row.alt_text) == (None, 1, None)
        refused = {name: row.error or "" for name, row in images.items() if row.error}
        assert set(refused) == {*pictures.GALLERY, "elsewhere.jpg"} - set(pictures.SIZES)
        assert "bytes are not an image" in refused["fake.png"]
        assert "served as text/html" in refused["as-html.jpg"]
        assert refused["large.png"].startswith("too_large")
        assert "decompression bomb refused" in refused["bomb.png"]
        assert refused["missing.png"].startswith("http_4xx")
        # An image on another (private) host than the page's: the egress policy refuses it.
        assert refused["elsewhere.jpg"].startswith("egress_denied")
        for name in refused:
            row = images[name]
            assert (row.image_path, row.content_hash, row.fetch_attempts) == (None, None, 1)
        # Each image URL was requested once (the refusals are not retried).
        pics = [r.path for r in site.requests() if r.path.startswith("/pics/")]
        assert sorted(pics) == sorted(f"/pics/{name}" for name in pictures.GALLERY)
        # Retention deletes pages only: the stored images stay.
        await prune(db, pages, Retention(keep_last=1, days=0.000001))
        assert await pages.get_blob(png.image_path) == files["photo.png"][0]
    finally:
        await pages.aclose()
        await db.dispose()


async def test_images_go_through_the_domains_proxy(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    """A domain that uses a proxy gets its images through it, with the page."""
    settings = make_settings(**IMAGE_SETTINGS)
    db = await open_database(settings)
    try:
        ids = await submit(db, settings, site.url("/gallery/13"))
        async with db.reader() as session:
            domain_id = await session.scalar(select(Domain.id))
        assert domain_id is not None
        with TestProxy(username="crawler", password="img-secret") as proxy:
            await add_proxy(db, settings, proxy, domain_id)
            await _crawl_gallery(db, settings, site, 13, submitted=ids)
            through = list(proxy.requests)
        assert site.url("/gallery/13") in through
        images = await _images(db)
        errors = {name: (row.error, row.fetch_attempts) for name, row in images.items()}
        assert site.url("/pics/photo.png") in through and site.url("/pics/snap.jpg") in through, (
            errors
        )
        images = await _images(db)
        assert images["photo.png"].image_path is not None
        assert images["snap.jpg"].image_path is not None
    finally:
        await db.dispose()


async def test_no_image_is_fetched_when_the_domain_does_not_ask(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(**IMAGE_SETTINGS)
    db = await open_database(settings)
    try:
        ids = await submit(db, settings, site.url("/gallery/8"))
        tasks = await crawl(db, settings, ids)
        assert [t.status for t in tasks.values()] == ["completed"]
        images = await _images(db)
        assert len(images) == len(pictures.GALLERY) + 1
        assert all(row.fetched_at is None and row.fetch_attempts == 0 for row in images.values())
        assert not [r for r in site.requests() if r.path.startswith("/pics/")]
    finally:
        await db.dispose()


async def test_a_changed_image_list_keeps_the_stored_copies(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    """A recrawl whose image list changed replaces the rows, keeping what was stored of the
    URLs still listed (no second download)."""
    settings = make_settings(**IMAGE_SETTINGS)

    db = await open_database(settings)
    try:
        await _crawl_gallery(db, settings, site, 9)
        before = await _images(db)
        async with db.reader() as session:
            product = await session.scalar(select(Product))
        assert product is not None
        kept = [before["photo.png"].image_url, before["snap.jpg"].image_url]
        record = ProductRecord(
            url=product.url,
            product_name=product.product_name,
            price=product.price,
            currency=product.currency,
            image_urls=[*kept, site.url("/pics/new.png")],
            parser_name="generic",
            parser_version="4",
        )
        async with db.session() as session:
            item = ProductInput(product.domain_id, None, product.url, product.url_hash, record)
            await save_products(session, [item])
        after = await _images(db)
        assert list(after) == ["photo.png", "snap.jpg", "new.png"]
        for name in ("photo.png", "snap.jpg"):
            old, new = before[name], after[name]
            assert (new.image_path, new.content_hash, new.width, new.fetched_at) == (
                old.image_path,
                old.content_hash,
                old.width,
                old.fetched_at,
            )
        assert (after["new.png"].fetched_at, after["new.png"].image_path) == (None, None)
    finally:
        await db.dispose()


async def test_images_wait_for_the_domains_turn(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    """With an hour's crawl delay, one image goes when the gate opens, and the gate then stays
    shut an hour from its sending: images keep the politeness of the domain's pages."""
    settings = make_settings(**IMAGE_SETTINGS)
    db = await open_database(settings)
    try:
        ids = await submit(db, settings, site.url("/gallery/12"))
        await crawl(db, settings, ids)
        hour_later = utcnow() + timedelta(hours=1)
        async with db.session() as session:
            await session.execute(
                update(Domain).values(
                    download_images=True, crawl_delay_seconds=3600, next_fetch_at=hour_later
                )
            )
        pool = WorkerPool(db, settings, concurrency=2)
        runner = asyncio.create_task(pool.run())
        try:
            async with db.session() as session:  # the turn comes: exactly one image may go
                await session.execute(update(Domain).values(next_fetch_at=utcnow()))

            async def tried() -> list[ProductImage]:
                return [i for i in (await _images(db)).values() if i.fetch_attempts]

            [image] = await eventually(tried, "one image tried")
        finally:
            pool.stop()
            await runner
        assert image.image_url.endswith("/pics/photo.png") and image.image_path is not None
        async with db.reader() as session:
            gate = await session.scalar(select(Domain.next_fetch_at))
        assert gate is not None and gate > utcnow() + timedelta(minutes=59)
        assert [r.path for r in site.requests() if r.path.startswith("/pics/")] == [
            "/pics/photo.png"
        ]
        assert len(await tried()) == 1  # the others were given back untried
    finally:
        await db.dispose()


async def test_an_image_takes_the_domains_turn(db: Database, settings: Settings) -> None:
    """Images keep the domain's crawl delay with its pages: the gate is one."""
    async with db.session() as session:
        domain = Domain(
            domain_name="gate.test", base_url="https://gate.test", parser_name="generic"
        )
        domain.user_agent = "t"
        domain.url_hash = "x"
        session.add(domain)
        await session.flush()
        domain_id = domain.id
    async with db.session() as session:
        assert await take(session, domain_id, 60) is None  # open: taken
    async with db.session() as session:
        opens = await take(session, domain_id, 60)  # now closed
    assert opens is not None
    async with db.session() as session:
        await open_after(session, domain_id, 0)
    async with db.session() as session:
        assert await take(session, domain_id, 60) is None


def _png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 10)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def test_inspect_reads_the_bytes_not_the_name() -> None:
    png = pictures.files()["photo.png"][0]
    found = inspect(png, "image/png; charset=binary", 10_000)
    assert (found.content_type, found.extension, found.width, found.height) == (
        "image/png",
        "png",
        40,
        30,
    )
    # Declared JPEG, is PNG: kept as what the bytes are.
    assert inspect(png, "image/jpeg", 10_000).content_type == "image/png"
    with pytest.raises(NotAnImage, match="not an image"):
        inspect(png, "application/octet-stream", 10_000)
    with pytest.raises(NotAnImage, match="not an image"):
        inspect(b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml", 10_000)
    with pytest.raises(NotAnImage, match="more than FORAGER_IMAGE_MAX_PIXELS"):
        inspect(png, "image/png", 40 * 30 - 1)
    # Past Pillow's own bomb limit the header alone is refused; nothing is decoded.
    with pytest.raises(NotAnImage, match="decompression bomb"):
        inspect(_png_header(200_000, 200_000), "image/png", 10**12)
    # Under Pillow's limit, ours: read from the header too.
    with pytest.raises(NotAnImage, match="5000×5000 pixels"):
        inspect(_png_header(5000, 5000), "image/png", 1_000_000)


# The app's own image loop may download the gallery before the test's pool: both run with the
# same limits.
@pytest.mark.parametrize("api_settings", [IMAGE_SETTINGS])
async def test_api_lists_and_serves_stored_images(api: httpx.AsyncClient, site: TestSite) -> None:
    runtime = api.app.state.runtime  # type: ignore[attr-defined]
    settings = runtime.settings
    assert settings.image_max_bytes == IMAGE_SETTINGS["image_max_bytes"]
    db = runtime.db
    [task_id] = await submit(db, settings, site.url("/gallery/11"))
    domain = (await api.get("/api/domains", params={"q": "127.0.0.1"})).json()["items"][0]
    assert domain["download_images"] is False
    changed = await api.patch(f"/api/domains/{domain['id']}", json={"download_images": True})
    assert changed.status_code == 200 and changed.json()["download_images"] is True
    pool = WorkerPool(db, settings, concurrency=2, pages=runtime.pages)
    runner = asyncio.create_task(pool.run())

    async def stored() -> list[dict[str, Any]] | None:
        async with db.reader() as session:
            product_id = await session.scalar(
                select(Product.id).where(Product.crawl_task_id == task_id)
            )
        if product_id is None:
            return None
        listed = (await api.get(f"/api/products/{product_id}/images")).json()
        return listed if all(i["fetched_at"] for i in listed) else None

    try:
        listed = await eventually(stored, "the product's images tried")
    finally:
        pool.stop()
        await runner
    by_name = {i["image_url"].rsplit("/", 1)[1]: i for i in listed}
    png = by_name["photo.png"]
    assert (png["stored"], png["position"], png["image_type"]) == (True, 0, "primary")
    assert (png["width"], png["height"], png["content_type"]) == (40, 30, "image/png")
    fake = by_name["fake.png"]
    assert (fake["stored"], fake["content_url"]) == (False, None)
    assert "not an image" in fake["error"]
    served = await api.get(png["content_url"])
    assert served.status_code == 200
    assert served.content == pictures.files()["photo.png"][0]
    assert served.headers["content-type"] == "image/png"
    assert served.headers["x-content-type-options"] == "nosniff"
    read = await api.get(
        png["content_url"],
        headers={"Authorization": f"Bearer {api.keys['read']}"},  # type: ignore[attr-defined]
    )
    assert read.status_code == 200
    anonymous = await api.get(png["content_url"], headers={"Authorization": ""})
    assert anonymous.status_code == 401
    product_id = png["content_url"].split("/")[3]
    not_stored = await api.get(f"/api/products/{product_id}/images/{fake['id']}/content")
    assert not_stored.status_code == 404
    elsewhere = await api.get(f"/api/products/{int(product_id) + 1000}/images/{png['id']}/content")
    assert elsewhere.status_code == 404
    metrics = (await api.get("/metrics")).text
    files = pictures.files()
    size = len(files["photo.png"][0]) + len(files["snap.jpg"][0])
    assert "forager_stored_images 2\n" in metrics
    assert f"forager_stored_image_bytes {size}\n" in metrics


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # row locks: PostgreSQL's
async def test_a_busy_proxy_delays_images_without_spending_their_tries(
    make_settings: SettingsFactory, site: TestSite
) -> None:
    """While the domain's one proxy is locked by another fetch's bookkeeping (here: held), the
    images wait for it; none is given up as tried."""
    settings = make_settings(**IMAGE_SETTINGS)
    db = await open_database(settings)
    try:
        [task_id] = await submit(db, settings, site.url("/gallery/13"))
        async with db.reader() as session:
            domain_id = await session.scalar(select(Domain.id))
        assert domain_id is not None
        with TestProxy(username="crawler", password="img-secret") as proxy:
            proxy_id = await add_proxy(db, settings, proxy, domain_id)
            await crawl(db, settings, [task_id])  # the page, images not yet asked for
            await _download_images(db, "127.0.0.1")
            async with db.session() as holder:
                await holder.execute(select(Proxy.id).where(Proxy.id == proxy_id).with_for_update())
                pool = WorkerPool(db, settings, concurrency=2)
                runner = asyncio.create_task(pool.run())
                try:

                    async def waiting() -> list[ProductImage]:
                        rows = (await _images(db)).values()
                        return [r for r in rows if (r.error or "").startswith("proxy:")]

                    postponed = await eventually(waiting, "an image to wait for the proxy")
                    assert all(r.fetch_attempts == 0 and r.fetched_at is None for r in postponed)
                    await holder.commit()  # the proxy is free again

                    async def all_tried() -> bool:
                        rows = (await _images(db)).values()
                        return all(row.fetched_at is not None for row in rows)

                    await eventually(all_tried, "every image tried", timeout=30)
                finally:
                    pool.stop()
                    await runner
        images = await _images(db)
        assert images["photo.png"].image_path is not None
        assert images["snap.jpg"].image_path is not None
        assert (images["photo.png"].fetch_attempts, images["photo.png"].error) == (1, None)
    finally:
        await db.dispose()
