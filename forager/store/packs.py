"""A local page store's pages appended to pack files: one gzip member per page, many per file.

One file per page made the filesystem, not Forager, the cost of storing a page: each page
paid an inode, a directory entry, a temporary name and a rename, and a filesystem that checks
every recently freed inode before reusing one (ext4 without a journal) made that ~1 ms per
page right after a crawl's pages were deleted. A pack is appended to by one writer (a parse
process, or the event loop's store), so a page costs one ``write`` and no lock. The format is
the web archives' own: a pack is a multi-member gzip file (``zcat`` prints every page in it),
like a WARC file, with the offset and length of each member in its key:

    packs/<YYYYMMDD>/<16 hex>.gz@<offset>+<length>

A key is handed out only after its member is written whole, so no row points at half a page;
a writer that fails mid-write (a full disk, a killed process) leaves a tail no key names, and
goes on after it. Deleting a page punches a hole where it was (Linux's ``fallocate``; the
space goes back to the filesystem), or, where the filesystem cannot, overwrites it with
zeros; a pack from two days back that holds no page any more is removed. A deleted page
reads as zeros, which no gzip member starts with.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import os
import re
import secrets
import threading
import time
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from forager.errors import PageStoreError

PACK_BYTES = 64 * 1024 * 1024  # a writer starts a new pack past this size (and each new day)
_KEY = re.compile(r"(packs/\d{8}/[0-9a-f]{16}\.gz)@(\d+)\+(\d+)")
_MAGIC = b"\x1f\x8b"
_PUNCH_HOLE = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
_GONE_DAYS = 2  # an empty pack this old has no writer any more (writers move on each day)


def is_pack_key(key: str) -> bool:
    return key.startswith("packs/")


def parse_key(key: str) -> tuple[str, int, int]:
    """``(pack, offset, length)`` of a pack key; a malformed one is a ``PageStoreError``."""
    match = _KEY.fullmatch(key)
    if match is None:
        raise PageStoreError(f"not a page key: {key!r}")
    return match.group(1), int(match.group(2)), int(match.group(3))


def _today() -> str:
    """Today's pack folder (UTC), named once a day: ``strftime`` at every page was ~1.5 % of a
    crawl's event loop."""
    global _day
    number = int(time.time() // 86400)
    if number != _day[0]:
        _day = (number, datetime.fromtimestamp(number * 86400, UTC).strftime("%Y%m%d"))
    return _day[1]


_day = (-1, "")  # the day's number since the epoch (UTC), and its name


class PackCursor:
    """Which pack a writer's next page goes to, and where that pack ends.

    The writer itself (``Appender``) may be another process: a parse process appends to the
    pack its parent names, and the parent learns the new end from the key it gets back.
    """

    def __init__(self, limit: int = PACK_BYTES) -> None:
        self.limit = limit
        self.pack: str | None = None
        self.end = 0
        self._day = ""

    def next_pack(self) -> str:
        day = _today()
        if self.pack is None or day != self._day or self.end >= self.limit:
            self._day, self.pack, self.end = day, f"packs/{day}/{secrets.token_hex(8)}.gz", 0
        return self.pack

    def wrote(self, key: str) -> None:
        pack, offset, length = parse_key(key)
        if pack == self.pack:
            self.end = max(self.end, offset + length)

    def written_after(self, root: Path) -> tuple[str, int] | None:
        """The key and size of a page written whole at the pack's end by a writer that gave
        no answer (killed mid-parse); None when there is none. Reads the file: a rare path."""
        if self.pack is None:
            return None
        try:
            with (root / self.pack).open("rb") as file:
                file.seek(self.end)
                tail = file.read()
        except OSError:
            return None
        if not tail.startswith(_MAGIC):
            return None
        start, self.end = self.end, self.end + len(tail)  # the next page goes after it
        if not _one_member(tail):  # cut short by the kill
            return None
        return f"{self.pack}@{start}+{len(tail)}", len(tail)


def _one_member(data: bytes) -> bool:
    """Whether ``data`` is exactly one whole gzip member."""
    inflate = zlib.decompressobj(wbits=31)
    try:
        inflate.decompress(data)
    except zlib.error:
        return False
    return inflate.eof and not inflate.unused_data


class Appender:
    """Appends pages to the pack it is told; one open file at a time."""

    def __init__(self) -> None:
        self._open_as: tuple[Path, str] | None = None  # (root, pack) of the open file
        self._fd = -1
        self.end = 0  # where the open pack ends

    def append(self, root: Path, pack: str, data: bytes) -> str:
        """Write ``data`` whole at the end of ``root/pack``; its key. ``OSError`` when it
        cannot (what was written of it is a tail no key names)."""
        if self._open_as != (root, pack):
            self._open(root, pack)
        offset = self.end
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            self.close()  # reopened at the true end next time
            raise
        self.end += len(data)
        return f"{pack}@{offset}+{len(data)}"

    def _open(self, root: Path, pack: str) -> None:
        self.close()
        path = root / pack
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:  # the day's first pack
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o644)
        self._fd, self._open_as, self.end = fd, (root, pack), os.fstat(fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._open_as = -1, None


class PackWriter:
    """A cursor and an appender behind a lock: the pages one process stores itself."""

    def __init__(self, root: Path, limit: int = PACK_BYTES) -> None:
        self.root = root
        self._cursor = PackCursor(limit)
        self._appender = Appender()
        self._lock = threading.Lock()  # big pages are written from a thread

    def append(self, data: bytes) -> str:
        with self._lock:
            key = self._appender.append(self.root, self._cursor.next_pack(), data)
            self._cursor.end = self._appender.end
            return key

    def close(self) -> None:
        with self._lock:
            self._appender.close()


def read(root: Path, key: str) -> bytes:
    """The gzipped page under ``key``; ``PageStoreError`` when it is not there (deleted)."""
    pack, offset, length = parse_key(key)
    try:
        with (root / pack).open("rb") as file:
            data = os.pread(file.fileno(), length, offset)
    except OSError as exc:
        raise PageStoreError(f"cannot read stored page {key}: {exc.strerror or exc}") from exc
    if len(data) != length or not data.startswith(_MAGIC):
        raise PageStoreError(f"cannot read stored page {key}: it was deleted")
    return data


def exists(root: Path, key: str) -> bool:
    pack, offset, length = parse_key(key)
    try:
        with (root / pack).open("rb") as file:
            whole = os.fstat(file.fileno()).st_size >= offset + length
            return whole and os.pread(file.fileno(), 2, offset) == _MAGIC
    except OSError:
        return False


def delete(root: Path, key: str) -> None:
    """Free the page's bytes; the pack goes too once it is old and holds no page."""
    pack, offset, length = parse_key(key)
    path = root / pack
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return  # gone already
    except OSError as exc:
        raise PageStoreError(f"cannot delete stored page {key}: {exc.strerror or exc}") from exc
    old = _old(pack)
    try:
        size = os.fstat(fd).st_size
        end = min(offset + length, size)
        if end > offset:
            end = _free_after(fd, end, size, past_end=old)
            if not _punch(fd, offset, end - offset):
                os.pwrite(fd, bytes(end - offset), offset)
        empty = old and _holds_nothing(fd, size)
    except OSError as exc:
        raise PageStoreError(f"cannot delete stored page {key}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if empty:
        with contextlib.suppress(OSError):
            path.unlink()
            path.parent.rmdir()  # the day's last pack (fails while others remain)


def _free_after(fd: int, end: int, size: int, past_end: bool) -> int:
    """``end`` moved to the end of its block when the rest of that block holds no page: the
    pages after this one there were deleted (zeros), so the whole block can be freed. A page
    that still lives there starts with gzip's magic, never with zeros; the bytes *before* a
    page are another page's trailer, which may end in zeros, so only this side is extended.
    Past the file's end only with ``past_end`` (an old pack: no writer appends to it now)."""
    block = os.fstat(fd).st_blksize or 4096
    stop = -(-end // block) * block
    if not past_end:
        stop = min(stop, size)
    if stop > end and not any(os.pread(fd, stop - end, end)):
        return stop
    return end


def _punch(fd: int, offset: int, length: int) -> bool:
    """Deallocate ``length`` bytes at ``offset``; False where the system cannot."""
    fallocate = _libc_fallocate()
    if fallocate is None:
        return False
    if fallocate(fd, _PUNCH_HOLE, ctypes.c_int64(offset), ctypes.c_int64(length)) == 0:
        return True
    if ctypes.get_errno() in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


@functools.cache
def _libc_fallocate() -> Any:
    """libc's ``fallocate``, or None where there is none (looked up once)."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        found = libc.fallocate
        found.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        found.restype = ctypes.c_int
        return found
    return None


def _holds_nothing(fd: int, size: int) -> bool:
    """Whether every byte of the pack is a hole (a pack zeroed where holes cannot be made
    is kept)."""
    if hasattr(os, "SEEK_DATA"):
        try:
            return os.lseek(fd, 0, os.SEEK_DATA) >= size
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data at or after 0
                return True
    return False


def _old(pack: str) -> bool:
    try:
        day = datetime.strptime(pack.split("/")[1], "%Y%m%d").replace(tzinfo=UTC)
    except ValueError:  # not a day this store names: kept
        return False
    return datetime.now(UTC) - day > timedelta(days=_GONE_DAYS)
