"""Parsing off the event loop: worker processes with a time budget per page (DESIGN.md 10).

A fetched page goes to one of ``FORAGER_PARSE_PROCESSES`` child processes (forkserver, with
the parsers imported once in the server), which decodes its charset, checks it for a robot /
block page, gzips it for the page store and parses it. With a local page store the child also
stores the page (appended to the pack its parent names, before the parse starts), so the
parent only moves the response in and one answer out: both cores work. A page that takes longer than
``FORAGER_PARSE_TIMEOUT_SECONDS`` fails ``parse``; its process is killed and replaced, so a
crafted page costs one budget, never the event loop (API, agent hub, heartbeats) or a core
for ever. The page is still recorded when it was stored before the budget ran out.

A live monitor's page goes the same way (``ParseJob.monitor``): decoded and read by its parser
or field map (``forager.parse.fieldmap``) under the same budget, neither ban-checked nor stored.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import gc
import gzip
import importlib
import logging
import os
import pickle
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from forager.config import Settings
from forager.discovery.links import (
    LinkFate,
    extract_links,
    given_links,
    link_fates,
    robots_sitemap_links,
    sitemap_links,
)
from forager.discovery.rules import LinkPolicy
from forager.discovery.sitemaps import SitemapError
from forager.errors import ForagerError, ParseError
from forager.fetch.base import FetchResponse
from forager.parse import fieldmap, registry
from forager.parse.base import Extracted, ProductRecord
from forager.parse.classify import classify
from forager.parse.items import CheckedItem, split
from forager.parse.registry import get_parser
from forager.parse.scripted import needs_scripts
from forager.parse.selectors import cached_map
from forager.queue.urls import Link
from forager.store.packs import Appender, PackCursor
from forager.worker.warmup import PRELOAD, fork_context

log = logging.getLogger(__name__)


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
    preview: bool = False  # every field's value and error (or link's fate) instead of a record
    # A local page store's directory: the child appends the fetched page to ``pack`` in it
    # (named by the pool, see ``forager.store.packs``) instead of sending it back.
    store: Path | None = None
    pack: str = ""
    # A live monitor's page: (selector type, selectors) of its field map, or (None, None) when
    # ``parser_name`` reads it; the answer is ``Parsed.data``.
    monitor: tuple[str | None, Any] | None = None
    # A crawl job's page: the links its rules take are returned (``Parsed.links``); a page the
    # job follows (a listing) is not parsed for a product (``follow_only``).
    links: LinkPolicy | None = None
    follow_only: bool = False
    sitemap: bool = False  # the page is a sitemap (read from ``body``: it may be gzip)
    robots_sitemaps: tuple[str, ...] = ()  # a start page's host's robots.txt Sitemap: lines
    # Fetched without a browser for an ``auto`` domain: when no product (or no price) is found,
    # say whether the page looks filled in by its scripts (``Parsed.scripted``).
    script_check: bool = False

    def __reduce__(self) -> tuple[type[ParseJob], tuple[Any, ...]]:
        """Pickled (to a parse process) as its values in field order (see ``Parsed``)."""
        return ParseJob, tuple([getattr(self, name) for name in _JOB_FIELDS])


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
    trace: str | None = None  # a parser bug's stack trace (kept on the task, bounded)
    fields: tuple[dict[str, Any], dict[str, str]] | None = None  # a preview: values, errors
    data: dict[str, Any] | None = None  # what a monitor read from its page
    links: tuple[Link, ...] = ()  # a crawl job's links taken from the page
    links_refused: int = 0  # the page's other links (out of scope, traps, no rule)
    scripted: str | None = None  # why the product looks rendered by scripts (``script_check``)
    link_fates: tuple[LinkFate, ...] = ()  # a rule preview: every link and what came of it

    def __reduce__(self) -> tuple[type[Parsed], tuple[Any, ...]]:
        """Pickled (from a parse process) as its values in field order: rebuilt by one call,
        where a slotted dataclass's own pickling sets one slot at a time."""
        return Parsed, tuple([getattr(self, name) for name in _PARSED_FIELDS])


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(ParseJob))
_PARSED_FIELDS = tuple(f.name for f in dataclasses.fields(Parsed))


def prepare(job: ParseJob, appender: Appender, compresslevel: int) -> tuple[Parsed, str]:
    """First stage: the page's text and the page appended to ``job.pack`` (with ``appender``)
    or gzipped for the caller to store (or the ban it is)."""
    if not job.fetched:
        return Parsed(), job.body.decode("utf-8", errors="replace")
    headers = {"content-type": job.content_type} if job.content_type else {}
    text = FetchResponse(job.url, job.status_code, headers, job.body, 0).text
    if job.monitor is not None:  # a monitor keeps what it read, not the page
        return Parsed(), text
    found = None if job.sitemap else classify(text)
    if found is not None:
        kind, what = found
        return Parsed(ban=(kind, f"{job.url} returned {what} (status {job.status_code})")), text
    page = gzip.compress(text.encode("utf-8"), compresslevel=compresslevel, mtime=0)
    if job.store is None:
        return Parsed(page_gz=page), text
    try:
        key = appender.append(job.store, job.pack, page)
    except OSError as exc:
        return Parsed(store_error=f"cannot store page: {exc.strerror or exc}"), text
    return Parsed(page_key=key, page_bytes=len(page)), text


def extract(job: ParseJob, text: str) -> Parsed:
    """Second stage: the record and items (and a crawl job's links), or the error that says
    why there are none."""
    if job.links is not None and job.preview:  # a rule preview on a stored page
        try:
            return Parsed(link_fates=tuple(link_fates(text, job.url, job.links)))
        except Exception as exc:  # a bug in link extraction: the preview fails, the process lives
            return Parsed(error=("internal", f"links: {type(exc).__name__}: {exc}"))
    if job.links is not None and job.follow_only:  # a job's listing or sitemap
        try:
            if job.sitemap:
                links, refused = sitemap_links(job.body, job.links)
            else:
                links, refused = extract_links(text, job.url, job.links)
                given = _listing_links(job, text)
                more, also_refused = given_links(given, job.url, job.links, tuple(links))
                links, refused = links + more, refused + also_refused
            if job.robots_sitemaps:
                more, also_refused = robots_sitemap_links(job.robots_sitemaps, job.links)
                links, refused = links + more, refused + also_refused
        except SitemapError as exc:
            return Parsed(error=(exc.error_type, f"{job.url}: {exc.message}"))
        except Exception as exc:  # a bug in link extraction: the task fails, the process lives
            return Parsed(error=("internal", f"links: {type(exc).__name__}: {exc}"))
        return Parsed(links=tuple(links), links_refused=refused)
    if job.follow_only:  # a job's listing or sitemap parsed again: no product to look for
        return Parsed()
    return _script_checked(job, text, _parse(job, text))


def _script_checked(job: ParseJob, text: str, parsed: Parsed) -> Parsed:
    """``parsed``, with why a browser would show more when it has no product or no price."""
    if not job.script_check or (parsed.error is not None and parsed.error[0] != "parse"):
        return parsed
    if parsed.record is not None and parsed.record.price is not None:
        return parsed
    return dataclasses.replace(parsed, scripted=needs_scripts(text))


def _parse(job: ParseJob, text: str) -> Parsed:
    try:
        if job.monitor is not None:
            parser = job.parser_name or None
            return Parsed(data=fieldmap.read(text, job.url, parser, *job.monitor))
        if job.selector is not None:
            selector_map = cached_map(*job.selector)
            if job.preview:
                return Parsed(fields=_json_ready(*selector_map.extract(text, job.url)))
            result = selector_map.parse(text, job.url)
        else:
            result = get_parser(job.parser_name).parse(text, job.url)
        record, items = split(result)
        given = result.links if isinstance(result, Extracted) else []
        if given and job.links is not None:  # a job's product page: the parser's links only
            links, refused = given_links(given, job.url, job.links)
            return Parsed(
                record=record, items=tuple(items), links=tuple(links), links_refused=refused
            )
    except ParseError as exc:
        return Parsed(error=(exc.error_type, exc.message))
    except ForagerError as exc:
        return Parsed(error=("internal", exc.message))
    except Exception as exc:  # a parser bug: the task fails, the process lives on
        message = f"{type(exc).__name__}: {exc}"
        return Parsed(error=("internal", message), trace=traceback.format_exc())
    return Parsed(record=record, items=tuple(items))


def _listing_links(job: ParseJob, text: str) -> list[str]:
    """The links the domain's parser gives on a job's listing page: its selector map's ``links``
    rule, or a parser that says it gives links (``gives_links = True``); the listing's product,
    if any, is not kept, and a parser that finds none (``ParseError``) gives no link."""
    if job.selector is not None:
        return cached_map(*job.selector).links_of(text)
    parser = get_parser(job.parser_name)
    if not getattr(parser, "gives_links", False):
        return []
    try:
        result = parser.parse(text, job.url)
    except ParseError:
        return []
    return list(result.links) if isinstance(result, Extracted) else []


def _json_ready(
    values: dict[str, Any], errors: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    return {k: str(v) if isinstance(v, Decimal) else v for k, v in values.items()}, errors


def _batch_priority(nice: int) -> None:
    """Parse work yields to the event loop, which every page goes through.

    A parse process woken by a new page does not preempt the process that sent it (Linux's
    SCHED_BATCH): without it, on a busy machine the event loop lost ~0.5 ms per page inside its
    send to a parse process. And it runs ``nice`` steps lower (``FORAGER_PARSE_NICE``): with two
    parse processes and the event loop on 2 cores, the loop otherwise waited for a core behind
    them (a 3,000-page crawl: 7 % less wall time at 10 than at 0). No-ops where unsupported.
    """
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_BATCH"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    if nice and hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(nice)


def _put(conn: Connection, message: Any) -> None:
    """``conn.send`` with the C pickler itself: ``Connection.send`` builds a ``ForkingPickler``
    (and its buffer) per message, ~2.5 % of a crawl's event loop; a page, an answer or a job
    carries nothing but plain values. ``Connection.recv`` reads either."""
    conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def _child_main(conn: Connection, preload: Sequence[str], compresslevel: int, nice: int) -> None:
    _batch_priority(nice)
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
            _put(conn, first)
            continue
        if first.page_gz is not None:  # sent on its own; the caller keeps it
            _put(conn, first)
        parsed = extract(job, text)
        answer = dataclasses.replace(parsed, page_key=first.page_key, page_bytes=first.page_bytes)
        _put(conn, answer)


_NOTHING = Parsed()


def _cut_short(job: ParseJob, child: _Child, first: Parsed, error: tuple[str, str]) -> Parsed:
    """A parse that gave no answer still keeps its page: the one sent back before the parse,
    or the one the child appended to its pack (when it is there whole)."""
    if job.store is not None:
        stored = child.cursor.written_after(job.store)
        if stored is not None:
            return Parsed(page_key=stored[0], page_bytes=stored[1], error=error)
    return Parsed(page_gz=first.page_gz, error=error)


class _NotStarted(Exception):
    """A page queued behind one whose process was stopped: it never started; run it again."""


@dataclass(slots=True, eq=False)
class _Queued:
    """A page sent to a parse process, and its answer to come."""

    job: ParseJob
    answer: asyncio.Future[Parsed]
    first: Parsed = _NOTHING  # the page sent back before its parse (a store other than local)


class _Child:
    """One parse process, its pipe and the pages sent to it, in order; the event loop reads the
    pipe from a reader added once (``start``), not one added and removed per message.

    Up to ``QUEUED`` pages wait in the pipe, so the process goes on to the next page at once
    instead of waiting for a busy event loop to send it one. A page's time budget starts when
    the one before it is answered (when it is sent, if none is before it): a page queued behind
    a stuck one is not charged for it, and when the stuck one's process is killed the pages
    behind it are sent again to another process (``_NotStarted``).
    """

    def __init__(
        self, ctx: Any, preload: Sequence[str], compresslevel: int, nice: int, budget: float
    ) -> None:
        self.conn, child_end = ctx.Pipe()
        self.process: BaseProcess = ctx.Process(
            target=_child_main, args=(child_end, tuple(preload), compresslevel, nice), daemon=True
        )
        self.process.start()
        child_end.close()
        self.cursor = PackCursor()  # the pack this child appends pages to
        self.queued: collections.deque[_Queued] = collections.deque()
        self.budget = budget
        self.on_answer: Callable[[], None] = _nothing  # room for another page (or it is over)
        self._stopping: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Future[None] | None = None
        self._clock: asyncio.TimerHandle | None = None
        self._gone: BaseException | None = None

    @property
    def alive(self) -> bool:
        return self._gone is None and self._stopping is None

    async def start(self) -> None:
        """Watch the pipe and wait for the process's imports ("ready")."""
        self._loop = asyncio.get_running_loop()
        self._ready = self._loop.create_future()
        self._loop.add_reader(self.conn.fileno(), self._readable)
        await self._ready

    def send(self, job: ParseJob) -> _Queued:
        if self._loop is None or self._gone is not None:
            raise EOFError(f"the parse process is gone: {self._gone!r}")
        queued = _Queued(job, self._loop.create_future())
        try:
            _put(self.conn, job)
        except OSError as exc:  # it died before we heard: the page goes to another process
            self.end(exc)
            raise _NotStarted() from exc
        self.queued.append(queued)
        if len(self.queued) == 1:
            self._start_clock()
        return queued

    def _start_clock(self) -> None:
        """The first queued page's budget starts now."""
        if self._clock is not None:
            self._clock.cancel()
            self._clock = None
        if self.queued and self._loop is not None:
            self._clock = self._loop.call_later(self.budget, self.end, TimeoutError())

    def _readable(self) -> None:
        try:
            message = self.conn.recv()
        except (EOFError, OSError) as exc:  # the process died
            self.end(exc)
            return
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)  # "ready"
            return
        if not self.queued:
            return  # nothing asked for it (cannot happen: one answer per page sent)
        head = self.queued[0]
        if message.page_gz is not None:  # the page to store, sent before its parse
            head.first = message
            return
        self.queued.popleft()
        if message.page_key is not None:
            self.cursor.wrote(message.page_key)
        self._start_clock()
        if not head.answer.done():  # its caller may have gone (cancelled)
            head.answer.set_result(message)
        self.on_answer()

    def end(self, why: BaseException) -> None:
        """Over budget or dead: kill the process; the first page gets ``why``, the pages behind
        it ``_NotStarted``."""
        if self._gone is not None:
            return
        self._gone = why
        loop = self._loop
        self._unwatch()
        if self._clock is not None:
            self._clock.cancel()
            self._clock = None
        with contextlib.suppress(OSError, ValueError):
            self.process.kill()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(EOFError(f"the parse process did not start: {why!r}"))
        for n, queued in enumerate(self.queued):
            if not queued.answer.done():
                queued.answer.set_exception(why if n == 0 else _NotStarted())
        self.queued.clear()
        if loop is not None and self._stopping is None:  # reaped even if no caller is left
            self._stopping = loop.create_task(self._stop(kill=True))
        self.on_answer()

    def _unwatch(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.conn.fileno())
            self._loop = None

    async def stop(self, *, kill: bool) -> None:
        """End the process (politely: after what was sent to it), once; returns when it has
        exited (a killed process writes nothing more)."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop(kill=kill))
        await asyncio.shield(self._stopping)

    async def _stop(self, *, kill: bool) -> None:
        self._unwatch()
        if self._clock is not None:
            self._clock.cancel()
        if kill:
            with contextlib.suppress(OSError, ValueError):
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


def _nothing() -> None:
    return None


QUEUED = 2  # pages sent to one parse process at once (the one it parses and the next)
# How long pages wait while every parse process is full before another starts (up to the
# pool's size): longer than a burst of a browser worker's pages takes one process.
GROW_AFTER_SECONDS = 0.05


class ParsePool:
    """``size`` parse processes, started on first use; ``parse`` waits for room in one."""

    def __init__(self, settings: Settings, size: int | None = None) -> None:
        self.size = size or settings.parse_processes or os.cpu_count() or 1
        self.timeout = settings.parse_timeout_seconds
        self.preload = [*PRELOAD, *settings.parser_modules]
        self.compresslevel = settings.page_compression_level
        self.nice = settings.parse_nice
        self._ctx = fork_context(self.preload)
        self._children: list[_Child] = []
        self._starting = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False
        self._warming: asyncio.Task[None] | None = None

    def warm(self) -> None:
        """Start the first parse process now, in the background, for a command that parses at
        once (``forager crawl``): its start (~35 ms) overlaps the submission and the first
        fetches instead of delaying the first page."""
        if self._children or self._starting or self._closed or self._warming is not None:
            return
        self._warming = asyncio.create_task(self._warm(), name="parse-pool-warm")

    async def _warm(self) -> None:
        try:
            await self._start_child()
        except Exception as exc:  # the first page starts one again, and says what failed
            log.warning("starting a parse process ahead of the first page failed: %r", exc)

    def _pick(self) -> _Child | None:
        """The live child with the fewest pages queued, if it has room."""
        best = min(
            (c for c in self._children if c.alive), key=lambda c: len(c.queued), default=None
        )
        return best if best is not None and len(best.queued) < QUEUED else None

    async def _send(self, job: ParseJob) -> tuple[_Child, _Queued]:
        """Send ``job`` to the least busy child with room (up to ``QUEUED`` pages each), else
        to a new one (up to ``size``); waits in turn while every one is full.

        A new process starts only when every one has been full for ``GROW_AFTER_SECONDS``
        (or there is none): pages that come slowly or in short bursts (a browser worker's, a
        monitor's) keep one process, and its memory, instead of ``size``; a crawl's stream
        keeps the first full and starts the others within moments."""
        woken = waited = False
        while True:
            if self._closed:
                raise ForagerError("the parse pool is closed")
            self._children = [c for c in self._children if c.alive]
            child = self._pick()
            grow = len(self._children) + self._starting < self.size
            # Whoever was woken for room takes it before anyone who came later.
            if child is not None and (woken or not self._waiters):
                if job.store is not None:
                    job = dataclasses.replace(job, pack=child.cursor.next_pack())
                try:
                    sent = child.send(job)
                except _NotStarted:
                    continue
                if woken:
                    self._wake_if_room()
                return child, sent
            if grow and (waited or not (self._children or self._starting)):
                await self._start_child()
                waited = False
                continue
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                # Woken by an answer (room) or a child ready; while the pool may grow, also
                # after GROW_AFTER_SECONDS: every child still full (none starting), one starts.
                await asyncio.wait((waiter,), timeout=GROW_AFTER_SECONDS if grow else None)
                if not waiter.done():
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                    waited = not self._starting
                    continue
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken, then cancelled: the room goes to the next in line
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise
            woken = True

    async def _start_child(self) -> None:
        self._starting += 1
        child: _Child | None = None
        try:
            child = await asyncio.to_thread(
                _Child, self._ctx, self.preload, self.compresslevel, self.nice, self.timeout
            )
            await child.start()
        except BaseException:
            if child is not None:
                await child.stop(kill=True)
            self._wake()  # another waiter may try to start one
            raise
        finally:
            self._starting -= 1
        child.on_answer = self._wake
        self._children.append(child)
        self._wake_if_room()

    def _wake(self) -> None:
        """Room in a child (a page answered) or a child gone: the first waiter tries again."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _wake_if_room(self) -> None:
        if self._waiters and (self._pick() is not None or self._closed):
            self._wake()

    async def parse(self, job: ParseJob) -> Parsed:
        """Parse ``job`` in a child within the time budget (a stuck child is replaced)."""
        while True:
            child, queued = await self._send(job)
            try:
                parsed = await queued.answer
            except _NotStarted:  # queued behind a page whose process was stopped
                await self._discard(child)
                continue
            except TimeoutError:
                log.warning(
                    "parsing %s took over %g s: its process is replaced", job.url, self.timeout
                )
                await self._discard(child)
                message = (
                    f"parsing took longer than the budget of {self.timeout:g} s "
                    "(FORAGER_PARSE_TIMEOUT_SECONDS); the parse process was stopped"
                )
                return _cut_short(queued.job, child, queued.first, ("parse", message))
            except (EOFError, OSError) as exc:
                await self._discard(child)
                return _cut_short(
                    queued.job, child, queued.first, ("internal", f"parse process died: {exc!r}")
                )
            if queued.first.page_gz is not None:
                return dataclasses.replace(parsed, page_gz=queued.first.page_gz)
            return parsed

    async def _discard(self, child: _Child) -> None:
        """A child that was killed (or died) leaves the pool once it has exited; a new one
        starts on demand."""
        if child in self._children:
            self._children.remove(child)
            self._wake()  # a waiter may start its replacement
        await child.stop(kill=True)

    async def aclose(self) -> None:
        """Stop every child (idle ones politely); parses still running are cut off."""
        if self._warming is not None:  # a child it starts is stopped with the others
            await asyncio.wait((self._warming,))  # its failure was logged
        self._closed = True
        while self._waiters:
            self._wake()
        children, self._children = self._children, []
        for child in children:
            if child.queued:
                child.end(ForagerError("the parse pool is closed"))
            await child.stop(kill=False)
