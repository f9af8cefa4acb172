"""A local page store's packs (``forager.store.packs``): pages appended as gzip members, read
back by offset, deleted one by one without touching their neighbours, packs rolled by size
and day, and what a writer that failed or was killed leaves behind."""

from __future__ import annotations

import asyncio
import gzip
import os
import random
from pathlib import Path

import pytest

from forager.errors import PageStoreError
from forager.store import packs
from forager.store.packs import Appender, PackCursor, PackWriter
from forager.store.pages import LocalPageStore, write_file


def _page(n: int, size: int) -> bytes:
    return gzip.compress(random.Random(n).randbytes(size), mtime=0)


def test_a_pack_is_a_multi_member_gzip_file(tmp_path: Path) -> None:
    writer = PackWriter(tmp_path)
    pages = [_page(n, 300 + 700 * n) for n in range(5)]
    keys = [writer.append(page) for page in pages]
    writer.close()
    assert len({packs.parse_key(key)[0] for key in keys}) == 1  # one pack
    assert [packs.read(tmp_path, key) for key in keys] == pages
    whole = (tmp_path / packs.parse_key(keys[0])[0]).read_bytes()
    assert gzip.decompress(whole) == b"".join(gzip.decompress(p) for p in pages)  # zcat reads it


@pytest.mark.parametrize("holes", [True, False], ids=["punched", "zeroed"])
def test_deleting_pages_leaves_every_other_page_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, holes: bool
) -> None:
    """Pages of many sizes (some far below a block, some spanning several), deleted in a random
    order: every page left reads back as written, every deleted one is gone."""
    if not holes:  # a filesystem that cannot punch holes: the page is overwritten with zeros
        monkeypatch.setattr(packs, "_punch", lambda fd, offset, length: False)
    rng = random.Random(7)
    writer = PackWriter(tmp_path)
    pages = {
        writer.append(page): page
        for page in (_page(n, rng.choice([10, 900, 6000, 20_000])) for n in range(120))
    }
    doomed = rng.sample(sorted(pages), 80)
    for n, key in enumerate(doomed):
        packs.delete(tmp_path, key)
        assert not packs.exists(tmp_path, key)
        with pytest.raises(PageStoreError, match="deleted"):
            packs.read(tmp_path, key)
        if n % 20 == 0:
            for kept in set(pages) - set(doomed[: n + 1]):
                assert packs.read(tmp_path, kept) == pages[kept]
    for kept in set(pages) - set(doomed):
        assert packs.read(tmp_path, kept) == pages[kept]
    packs.delete(tmp_path, doomed[0])  # again: not an error
    assert packs.read(tmp_path, writer.append(b"\x1f\x8b after")) == b"\x1f\x8b after"


def test_deleted_pages_give_their_blocks_back(tmp_path: Path) -> None:
    writer = PackWriter(tmp_path)
    keys = [writer.append(_page(n, 9000)) for n in range(40)]
    writer.close()
    pack = tmp_path / packs.parse_key(keys[0])[0]
    before = pack.stat().st_blocks
    for key in reversed(keys[5:]):  # newest first: each page's last block is freed whole too
        packs.delete(tmp_path, key)
    after = pack.stat().st_blocks
    if after == before:
        pytest.skip("this filesystem keeps the blocks of a punched range (no hole punching)")
    kept = sum(packs.parse_key(key)[2] for key in keys[:5])
    assert after * 512 <= kept + 2 * 4096
    assert pack.stat().st_size == packs.parse_key(keys[-1])[1] + packs.parse_key(keys[-1])[2]


def test_an_old_pack_that_holds_no_page_is_removed(tmp_path: Path) -> None:
    old = "packs/20200101/0123456789abcdef.gz"
    appender = Appender()
    keys = [appender.append(tmp_path, old, _page(n, 5000)) for n in range(3)]
    appender.close()
    (tmp_path / "packs/20200101/fedcba9876543210.gz").write_bytes(b"another pack of that day")
    for key in reversed(keys):
        packs.delete(tmp_path, key)
    if (tmp_path / old).exists() and (tmp_path / old).stat().st_blocks:
        pytest.skip("this filesystem cannot punch holes: a pack of zeros is kept")
    assert not (tmp_path / old).exists()
    assert (tmp_path / "packs/20200101").is_dir()  # the other pack of the day stays

    today = PackWriter(tmp_path)
    key = today.append(_page(1, 5000))
    packs.delete(tmp_path, key)
    assert (tmp_path / packs.parse_key(key)[0]).exists()  # today's pack may still be written


def test_a_writer_moves_to_a_new_pack_past_its_size_and_each_day(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = PackWriter(tmp_path, limit=10_000)
    first = [packs.parse_key(writer.append(_page(n, 4000)))[0] for n in range(6)]
    assert len(set(first)) >= 2 and all(
        (tmp_path / pack).stat().st_size < 10_000 + 5000 for pack in set(first)
    )
    monkeypatch.setattr(packs, "_today", lambda: "20991231")
    later = packs.parse_key(writer.append(_page(9, 100)))[0]
    assert later.startswith("packs/20991231/") and later not in first


def test_a_failed_write_is_an_error_and_the_next_page_goes_after_it(tmp_path: Path) -> None:
    (tmp_path / "packs").write_bytes(b"")  # a file where the directory goes
    store = LocalPageStore(tmp_path)
    with pytest.raises(PageStoreError, match="cannot store page"):
        asyncio.run(store.put_gzip("ab" * 32, _page(1, 100)))
    (tmp_path / "packs").unlink()

    pack = "packs/20261127/00000000000000aa.gz"
    appender = Appender()
    (tmp_path / "packs/20261127").mkdir(parents=True)
    (tmp_path / pack).write_bytes(b"\x1f\x8b half a page")  # a writer killed mid-write
    key = appender.append(tmp_path, pack, _page(2, 100))
    assert packs.parse_key(key)[1] == len(b"\x1f\x8b half a page")
    assert packs.read(tmp_path, key) == _page(2, 100)


def test_the_page_a_killed_parse_process_wrote_whole_is_found(tmp_path: Path) -> None:
    """The pool names the pack and learns its end from each answer; a child killed after
    appending its page (before answering) left that page at the end, whole or cut short."""
    cursor = PackCursor()
    pack = cursor.next_pack()
    child = Appender()
    cursor.wrote(child.append(tmp_path, pack, _page(1, 3000)))
    assert cursor.written_after(tmp_path) is None  # nothing unanswered
    page = _page(2, 3000)
    unanswered = child.append(tmp_path, pack, page)
    found = cursor.written_after(tmp_path)
    assert found == (unanswered, len(page))
    assert packs.read(tmp_path, found[0]) == page

    child.append(tmp_path, pack, _page(3, 3000)[:50])  # killed mid-write
    assert cursor.written_after(tmp_path) is None
    assert cursor.end == (tmp_path / pack).stat().st_size  # the next page goes after it
    other = "packs/20261127/00000000000000bb.gz"
    for n in range(2):
        child.append(tmp_path, other, _page(n, 500))
    stale = PackCursor()  # an end that missed answers: two whole pages after it, not one
    stale.pack = other
    assert stale.written_after(tmp_path) is None


def test_pages_stored_one_file_each_stay_readable(tmp_path: Path) -> None:
    old = f"ab/{'ab' * 32}-20261101T000000000000Z-abcdef.html.gz"
    write_file(tmp_path, old, gzip.compress(b"<html>old</html>"))
    store = LocalPageStore(tmp_path)

    async def check() -> None:
        assert await store.get(old) == b"<html>old</html>"
        assert await store.exists(old)
        await store.delete(old)
        assert not await store.exists(old)

    asyncio.run(check())


@pytest.mark.parametrize(
    "key",
    [
        "packs/../../etc/passwd@0+10",
        "packs/20261127/0123456789abcdef.gz@0",
        "packs/20261127/0123456789abcdef.gz@-1+5",
        "packs/2026112/0123456789abcdef.gz@0+5",
        "packs/20261127/0123456789abcdeg.gz@0+5",
    ],
)
def test_malformed_pack_keys_are_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(PageStoreError, match="not a page key"):
        packs.read(tmp_path, key)
    with pytest.raises(PageStoreError, match="not a page key"):
        packs.delete(tmp_path, key)
    assert os.listdir(tmp_path) == []
