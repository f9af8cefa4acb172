"""The page store: raw pages kept gzip-compressed under a key recorded on the attempt and task.

Backends: ``LocalPageStore`` (a directory), ``S3PageStore`` (``forager.store.s3``, an
S3-compatible bucket) and ``MemoryPageStore`` (tests, one-shot crawls). ``open_page_store``
picks one from the settings; the composition root calls it once per process.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from forager.errors import PageStoreError
from forager.store import packs
from forager.store.packs import PackWriter


class PageStore(Protocol):
    """``put`` a page, get back its key; ``get`` the page by that key.

    ``put_gzip`` stores a page the caller compressed already (the parse processes gzip each
    page beside parsing it, so the event loop's process does not).
    """

    async def put(self, url_hash: str, body: bytes) -> str: ...

    async def put_gzip(self, url_hash: str, data: bytes) -> str: ...

    def pack_root(self) -> Path | None:
        """The directory another process may append pages to itself, each to a pack it is
        told (``forager.store.packs``); None when only ``put``/``put_gzip`` can store one."""

    async def get(self, key: str) -> bytes: ...

    async def put_blob(self, key: str, data: bytes, content_type: str) -> None:
        """Store ``data`` as it is under ``key`` (product images: the key names the content, so
        writing it twice stores the same bytes)."""

    async def get_blob(self, key: str) -> bytes:
        """The bytes ``put_blob`` stored under ``key``."""
        ...

    async def exists(self, key: str) -> bool: ...

    async def delete(self, key: str) -> None:
        """Remove a page; a page already gone is not an error (retention may race itself)."""

    async def check(self) -> None:
        """Refuse, with a ``PageStoreError`` naming the problem, a store that cannot be used
        (run at start-up: a missing bucket or a wrong key is reported then, not per page)."""

    async def aclose(self) -> None: ...


def page_key(url_hash: str, when: datetime | None = None) -> str:
    """``ab/<url_hash>-<UTC time>-<random>.html.gz``: one object per fetch (S3, memory); a URL's
    pages share a prefix, newest sorts last. A local store appends pages to packs instead
    (``forager.store.packs``); its keys of before were these, or before 2026-11-27
    ``ab/<url_hash>/<time>-<random>.html.gz``, and stay readable: such a key is a path."""
    stamp = (when or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{url_hash[:2]}/{url_hash}-{stamp}-{secrets.token_hex(3)}.html.gz"


def image_key(content_hash: str, extension: str) -> str:
    """``images/ab/<sha256>.<ext>``: one object per distinct image, whichever products use it
    (retention only ever deletes the pages attempts point at, never these)."""
    return f"images/{content_hash[:2]}/{content_hash}.{extension}"


def write_file(root: Path, key: str, data: bytes, tmp_suffix: str = ".tmp") -> None:
    """Write ``data`` to ``root/key`` whole or not at all (a local store's image). ``key`` is
    one ``image_key`` made (hex only): no need to resolve it as ``get`` does."""
    path = root / key
    tmp = path.with_name(path.name + tmp_suffix)
    try:
        tmp.write_bytes(data)
    except FileNotFoundError:  # the URL's first page (or its directory was pruned)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
    os.replace(tmp, path)  # readers never see a half-written page


class LocalPageStore:
    """Pages under a directory (the data dir by default), appended to pack files
    (``forager.store.packs``); images one file each. Keys of pages stored one file each
    (before 2026-11-27) stay readable."""

    def __init__(self, root: Path, compresslevel: int = 3) -> None:
        self.root = root
        self.compresslevel = compresslevel
        self._packs = PackWriter(root)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise PageStoreError(f"page key {key!r} points outside the page store")
        return path

    async def put(self, url_hash: str, body: bytes) -> str:
        return await self.put_gzip(
            url_hash, gzip.compress(body, compresslevel=self.compresslevel, mtime=0)
        )

    def pack_root(self) -> Path | None:
        return self.root

    async def put_gzip(self, url_hash: str, data: bytes) -> str:
        try:
            # A small page is written inline: a thread hand-off costs more than the write.
            if len(data) < 64 * 1024:
                return self._packs.append(data)
            return await asyncio.to_thread(self._packs.append, data)
        except OSError as exc:
            raise PageStoreError(f"cannot store page: {exc.strerror or exc}") from exc

    async def get(self, key: str) -> bytes:
        try:
            if packs.is_pack_key(key):
                data = await asyncio.to_thread(packs.read, self.root, key)
            else:
                data = await asyncio.to_thread(self._path(key).read_bytes)
            return gzip.decompress(data)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise PageStoreError(f"cannot read stored page {key}: {exc}") from exc

    async def put_blob(self, key: str, data: bytes, content_type: str) -> None:
        self._path(key)  # refuse a key outside the store
        # Two workers may store the same image at once: each writes its own temporary file.
        suffix = f".{secrets.token_hex(4)}.tmp"
        try:
            await asyncio.to_thread(write_file, self.root, key, data, suffix)
        except OSError as exc:
            raise PageStoreError(f"cannot store {key}: {exc.strerror or exc}") from exc

    async def get_blob(self, key: str) -> bytes:
        try:
            return await asyncio.to_thread(self._path(key).read_bytes)
        except OSError as exc:
            raise PageStoreError(f"cannot read stored {key}: {exc.strerror or exc}") from exc

    async def exists(self, key: str) -> bool:
        if packs.is_pack_key(key):
            return await asyncio.to_thread(packs.exists, self.root, key)
        return await asyncio.to_thread(self._path(key).is_file)

    async def delete(self, key: str) -> None:
        if packs.is_pack_key(key):
            await asyncio.to_thread(packs.delete, self.root, key)
            return
        try:
            await asyncio.to_thread(self._path(key).unlink, missing_ok=True)
        except OSError as exc:
            raise PageStoreError(f"cannot delete stored page {key}: {exc.strerror or exc}") from exc

    async def check(self) -> None:
        try:
            await asyncio.to_thread(self.root.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise PageStoreError(
                f"cannot use the page store directory {self.root}: {exc.strerror or exc}"
            ) from exc

    async def aclose(self) -> None:
        self._packs.close()


class MemoryPageStore:
    """In-memory page store for tests and one-shot crawls that keep nothing."""

    def __init__(self) -> None:
        self.pages: dict[str, bytes] = {}

    async def put(self, url_hash: str, body: bytes) -> str:
        return await self.put_gzip(url_hash, gzip.compress(body, mtime=0))

    async def put_gzip(self, url_hash: str, data: bytes) -> str:
        key = page_key(url_hash)
        self.pages[key] = data
        return key

    def pack_root(self) -> Path | None:
        return None

    async def get(self, key: str) -> bytes:
        try:
            return gzip.decompress(self.pages[key])
        except KeyError:
            raise PageStoreError(f"no stored page {key!r}") from None

    async def put_blob(self, key: str, data: bytes, content_type: str) -> None:
        self.pages[key] = data

    async def get_blob(self, key: str) -> bytes:
        try:
            return self.pages[key]
        except KeyError:
            raise PageStoreError(f"nothing stored under {key!r}") from None

    async def exists(self, key: str) -> bool:
        return key in self.pages

    async def delete(self, key: str) -> None:
        self.pages.pop(key, None)

    async def check(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
