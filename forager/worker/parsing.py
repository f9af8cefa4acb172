"""Parsing off the event loop: worker processes with a time budget per page (DESIGN.md 10).

A fetched page goes to one of ``FORAGER_PARSE_PROCESSES`` child processes (forkserver, with
the parsers imported once in the server), which decodes its charset, checks it for a robot /
block page, gzips it for the page store and parses it. With a local page store the child also
stores the page (appended to the pack its parent names, before the parse starts), so the
parent only moves the response in and one answer out: both cores work. A page that takes longer than
``FORAGER_PARSE_TIMEOUT_SECONDS`` fails ``parse``; its process is killed and replaced, so a
crafted page costs one budget, never the event loop (API, agent hub, heartbeats) or a core
for ever. The page is still recorded when it was stored before the budget ran out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import gzip
import importlib
import logging
import multiprocessing
import os
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from forager.config import Settings
from forager.errors import ForagerError, ParseError
from forager.fetch.base import FetchResponse
from forager.parse import registry
from forager.parse.base import ProductRecord
from forager.parse.classify import classify
from forager.parse.items import CheckedItem, split
from forager.parse.registry import get_parser
from forager.parse.selectors import cached_map
from forager.store.packs import Appender, PackCursor

log = logging.getLogger(__name__)
_PRELOAD = [
    "forager.worker.parsing",  # the children's own module, imported once in the fork server
    "forager.parse.registry",
    "forager.parse.generic",
    "forager.parse.amazon",
    "forager.parse.selectors",
]


@dataclass(frozen=True, slots=True)
class ParseJob:
    """One page to parse. ``fetched`` pages are charset-decoded, ban-checked and gzipped first;
    a stored page (``fetched=False``) is UTF-8 text already."""

    url: str
    parser_name: str
    body: bytes
    content_type: str = ""
    status_code: int = 200
    fetched: bool = True
    # The domain's selector map when its parser is "selector": (domain id, version, fields).
    selector: tuple[int, int, dict[str, Any]] | None = None
    preview: bool = False  # give every field's value and error instead of a record
    # A local page store's directory: the child appends the fetched page to ``pack`` in it
    # (named by the pool, see ``forager.store.packs``) instead of sending it back.
    store: Path | None = None
    pack: str = ""


@dataclass(frozen=True, slots=True)
class Parsed:
    """What came of a job: a ban, or the page (stored, or gzipped for the caller to store)
    plus a record and items, or an error."""

    ban: tuple[str, str] | None = None  # error_type, message: a robot check served as a page
    page_gz: bytes | None = None  # the page to store, when the child did not store it
    page_key: str | None = None  # where the child stored the page (a local page store)
    page_bytes: int | None = None  # its gzipped size
    store_error: str | None = None  # the child could not store the page
    record: ProductRecord | None = None
    items: tuple[CheckedItem, ...] = ()
    error: tuple[str, str] | None = None  # error_type, message
    fields: tuple[dict[str, Any], dict[str, str]] | None = None  # a preview: values, errors


def prepare(
    job: ParseJob, appender: Appender | None = None, compresslevel: int = 3
) -> tuple[Parsed, str]:
    """First stage: the page's text and the page appended to ``job.pack`` (with ``appender``)
    or gzipped for the caller to store (or the ban it is)."""
    if not job.fetched:
        return Parsed(), job.body.decode("utf-8", errors="replace")
    headers = {"content-type": job.content_type} if job.content_type else {}
    text = FetchResponse(job.url, job.status_code, headers, job.body, 0).text
    found = classify(text)
    if found is not None:
        kind, what = found
        return Parsed(ban=(kind, f"{job.url} returned {what} (status {job.status_code})")), text
    page = gzip.compress(text.encode("utf-8"), compresslevel=compresslevel, mtime=0)
    if job.store is None or appender is None:
        return Parsed(page_gz=page), text
    try:
        key = appender.append(job.store, job.pack, page)
    except OSError as exc:
        return Parsed(store_error=f"cannot store page: {exc.strerror or exc}"), text
    return Parsed(page_key=key, page_bytes=len(page)), text


def extract(job: ParseJob, text: str) -> Parsed:
    """Second stage: the record and items, or the error that says why there are none."""
    try:
        if job.selector is not None:
            selector_map = cached_map(*job.selector)
            if job.preview:
                return Parsed(fields=_json_ready(*selector_map.extract(text, job.url)))
            result = selector_map.parse(text, job.url)
        else:
            result = get_parser(job.parser_name).parse(text, job.url)
        record, items = split(result)
    except ParseError as exc:
        return Parsed(error=(exc.error_type, exc.message))
    except ForagerError as exc:
        return Parsed(error=("internal", exc.message))
    except Exception as exc:  # a parser bug: the task fails, the process lives on
        return Parsed(error=("internal", f"{type(exc).__name__}: {exc}"))
    return Parsed(record=record, items=tuple(items))


def _json_ready(
    values: dict[str, Any], errors: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    return {k: str(v) if isinstance(v, Decimal) else v for k, v in values.items()}, errors


def _batch_priority() -> None:
    """Parse work yields to the event loop: a parse process woken by a new page does not
    preempt the process that sent it (Linux's SCHED_BATCH; a no-op elsewhere). Without it, on
    a busy machine the event loop lost ~0.5 ms per page inside its send to a parse process."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_BATCH"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def _child_main(conn: Connection, preload: Sequence[str], compresslevel: int = 3) -> None:
    _batch_priority()
    for module in preload:
        importlib.import_module(module)
    # Plugins found and imported once, before any page's budget; a broken one was reported
    # by the process that started this one (at start-up), not again by each parse process.
    logging.getLogger("forager.parse.plugins").setLevel(logging.ERROR)
    registry.entries()
    gc.freeze()  # the parsers and what they imported live as long as the process (see cli)
    conn.send("ready")  # the imports are not part of any page's budget
    appender = Appender()
    while True:
        try:
            job = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if job is None:
            return
        # The page is stored (or sent back) before the parse starts: a parse over budget
        # still keeps it. A stored page needs no message of its own.
        first, text = prepare(job, appender, compresslevel)
        if first.ban is not None or first.store_error is not None:
            conn.send(first)
            continue
        if first.page_gz is not None:  # sent on its own; the caller keeps it
            conn.send(first)
        parsed = extract(job, text)
        conn.send(dataclasses.replace(parsed, page_key=first.page_key, page_bytes=first.page_bytes))


_NOTHING = Parsed()


def _cut_short(job: ParseJob, child: _Child, first: Parsed, error: tuple[str, str]) -> Parsed:
    """A parse that gave no answer still keeps its page: the one sent back before the parse,
    or the one the child appended to its pack (when it is there whole)."""
    if job.store is not None:
        stored = child.cursor.written_after(job.store)
        if stored is not None:
            return Parsed(page_key=stored[0], page_bytes=stored[1], error=error)
    return Parsed(page_gz=first.page_gz, error=error)


class _Child:
    """One parse process and its pipe; the event loop reads the pipe from a reader added once
    (``watch``), not one added and removed per message."""

    def __init__(self, ctx: Any, preload: Sequence[str], compresslevel: int) -> None:
        self.conn, child_end = ctx.Pipe()
        self.process: BaseProcess = ctx.Process(
            target=_child_main, args=(child_end, tuple(preload), compresslevel), daemon=True
        )
        self.process.start()
        child_end.close()
        self.cursor = PackCursor()  # the pack this child appends pages to
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiter: asyncio.Future[Any] | None = None
        self._gone: BaseException | None = None

    def watch(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.conn.fileno(), self._readable)

    def _unwatch(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.conn.fileno())
            self._loop = None

    def _readable(self) -> None:
        waiter, self._waiter = self._waiter, None
        try:
            message = self.conn.recv()
        except (EOFError, OSError) as exc:  # the process died
            self._gone = exc
            self._unwatch()
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)
            return
        if waiter is not None and not waiter.done():
            waiter.set_result(message)

    async def recv(self) -> Any:
        if self._gone is not None:
            raise EOFError(f"the parse process is gone: {self._gone!r}")
        self._waiter = asyncio.get_running_loop().create_future()
        return await self._waiter

    async def stop(self, *, kill: bool) -> None:
        self._unwatch()
        if kill:
            self.process.kill()
        else:
            with contextlib.suppress(OSError):
                self.conn.send(None)
        await asyncio.to_thread(self.process.join, 5)
        if self.process.is_alive():
            self.process.kill()
            await asyncio.to_thread(self.process.join, 5)
        self.conn.close()
        self.process.close()


class ParsePool:
    """``size`` parse processes, started on first use; ``parse`` waits for a free one."""

    def __init__(self, settings: Settings, size: int | None = None) -> None:
        self.size = size or settings.parse_processes or os.cpu_count() or 1
        self.timeout = settings.parse_timeout_seconds
        self.preload = [*_PRELOAD, *settings.parser_modules]
        self.compresslevel = settings.page_compression_level
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(self.preload)
        self._idle: list[_Child] = []
        self._started = 0
        self._free = asyncio.Condition()
        self._closed = False

    async def _acquire(self) -> _Child:
        async with self._free:
            while not self._idle and self._started >= self.size:
                await self._free.wait()
            if self._closed:
                raise ForagerError("the parse pool is closed")
            if self._idle:
                return self._idle.pop()
            self._started += 1
        try:
            child = await asyncio.to_thread(_Child, self._ctx, self.preload, self.compresslevel)
            child.watch()
            await child.recv()  # "ready"
            return child
        except BaseException:
            await self._gone()
            raise

    async def _release(self, child: _Child) -> None:
        async with self._free:
            if not self._closed:
                self._idle.append(child)
                self._free.notify()
                return
        await child.stop(kill=False)  # finished after the pool closed

    async def _gone(self) -> None:
        async with self._free:
            self._started -= 1
            self._free.notify()

    async def parse(self, job: ParseJob) -> Parsed:
        """Parse ``job`` in a child within the time budget (a stuck child is replaced)."""
        child = await self._acquire()
        first: Parsed = _NOTHING
        if job.store is not None:
            job = dataclasses.replace(job, pack=child.cursor.next_pack())
        try:
            async with asyncio.timeout(self.timeout):
                child.conn.send(job)
                parsed: Parsed = await child.recv()
                if parsed.page_gz is not None:  # the page to store, sent before its parse
                    first = parsed
                    parsed = await child.recv()
        except TimeoutError:
            log.warning("parsing %s took over %g s: its process is replaced", job.url, self.timeout)
            await self._discard(child)
            message = (
                f"parsing took longer than the budget of {self.timeout:g} s "
                "(FORAGER_PARSE_TIMEOUT_SECONDS); the parse process was stopped"
            )
            return _cut_short(job, child, first, ("parse", message))
        except (EOFError, OSError) as exc:
            await self._discard(child)
            return _cut_short(job, child, first, ("internal", f"parse process died: {exc!r}"))
        except BaseException:  # cancelled mid-parse: the child's state is unknown
            await asyncio.shield(self._discard(child))
            raise
        if parsed.page_key is not None:
            child.cursor.wrote(parsed.page_key)
        await self._release(child)
        if first.page_gz is not None:
            return dataclasses.replace(parsed, page_gz=first.page_gz)
        return parsed

    async def _discard(self, child: _Child) -> None:
        try:
            await child.stop(kill=True)
        finally:
            await self._gone()

    async def aclose(self) -> None:
        """Stop every child (idle ones politely); parses still running are cut off."""
        async with self._free:
            self._closed = True
            children, self._idle = self._idle, []
            self._free.notify_all()
        for child in children:
            await child.stop(kill=False)
