"""One task's path, in order: claim → fetch (with its policy) → store → parse → finish.

The claim has already moved the task to ``crawling`` and read what its domain says (fetcher,
proxies, robots switch). The fetch asks the policy first (robots.txt; a proxy only for domains
that use them), the parse process decodes, checks, gzips and parses the page, the page store
keeps it, and the writer records everything about the task — attempt, events, status, product —
in one group commit. Every move is a compare-and-set on the worker's lease, so a task an
operator paused or cancelled, or whose lease expired, is dropped without touching its new state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import Domain
from forager.db.types import utcnow
from forager.discovery.policies import LinkPolicies
from forager.domains.profile import open_profile
from forager.domains.robots import Verdict
from forager.domains.sticky_sessions import Lease, StickySessions
from forager.errors import FetchError, PageStoreError
from forager.fetch.base import Fetcher, FetchRequest, FetchResponse
from forager.fetch.fetcher_set import AUTO
from forager.items.persist import ItemBatch
from forager.parse.base import ProductRecord
from forager.parse.registry import UnknownParser, get_parser
from forager.parse.selectors import SELECTOR
from forager.politeness.gate import open_after
from forager.proxies.selection import DomainPolicy, NoProxyAvailable, ProxyChoice
from forager.queue.door import (
    FETCHED_VIA,
    ClaimedTask,
    Discovery,
    Ending,
    FetchAttempt,
    TaskQueue,
)
from forager.queue.lifecycle import LEASED, TaskStatus
from forager.store.pages import PageStore
from forager.worker.escalation import Escalation
from forager.worker.parsing import Parsed, ParseJob, ParsePool
from forager.worker.policy import FetchPolicy
from forager.worker.writer import Finish, GroupWriter

log = logging.getLogger(__name__)
S = TaskStatus


class _Gate:
    """Reopens the task's domain once its request is sent (or, failing that, when it ends)."""

    def __init__(self, pipeline: Pipeline, task: ClaimedTask, opened: bool = False) -> None:
        self.db = pipeline.db
        self.task = task
        self.opened = opened or task.crawl_delay_seconds <= 0  # no delay: the claim never closed it

    async def open(self) -> None:
        if not self.opened:
            self.opened = True
            async with self.db.session() as session:
                await open_after(session, self.task.domain_id, self.task.crawl_delay_seconds)


class Pipeline:
    """Runs claimed tasks to their next resting state; never raises for a task's failure.

    ``fetcher`` may be None for a pipeline that only finishes tasks fetched elsewhere
    (``run_fetched``: the agent hub); robots.txt is fetched through ``robots_fetcher``
    (default: ``fetcher``).
    """

    def __init__(
        self,
        db: Database,
        queue: TaskQueue,
        fetcher: Fetcher | None,
        pages: PageStore,
        box: SecretBox | None,
        worker_id: str,
        *,
        parser: ParsePool,
        writer: GroupWriter,
        robots_fetcher: Fetcher | None = None,
    ) -> None:
        self.db = db
        self.queue = queue
        self.fetcher = fetcher
        self.pages = pages
        self.box = box  # opens the request profiles' secret values
        self.worker_id = worker_id
        self.parser = parser
        self.writer = writer
        self.link_policies = LinkPolicies(db)  # crawl jobs' scope and rules (issue 32)
        self.sessions = StickySessions(db, queue.settings, box)  # sticky sessions (issue 33)
        # robots.txt and the proxy choice; the outcome's bookkeeping is the writer's.
        self.policy = FetchPolicy(
            db, queue.settings, box, worker_id, fetcher=robots_fetcher or fetcher
        )
        self.escalation = Escalation(db, queue.settings, fetcher, self.parse_fetched)
        # The tasks of ``run`` whose request is over: their page is being parsed or written.
        # They hold no request slot (``WorkerPool._room``, the claim's ``answered``), and
        # ``on_answered`` is told when one more joins them.
        self.answered: set[int] = set()
        self.on_answered: Callable[[], None] = lambda: None
        self.writing = 0  # its tasks handed to the writer, waiting for their group's commit
        # Whether the task handed to the writer now is the last of its worker's still out
        # (``WorkerPool._last_out``): then its group is written at once (``Finish.last``), not
        # after the writer's interval.
        self.last_out: Callable[[], bool] = lambda: False

    async def run(self, task: ClaimedTask) -> str | None:
        """Process ``task``; returns the status it ended in (None: it was taken away)."""
        try:
            if task.status in (S.QUEUED, S.CRAWLING):
                return await self._crawl(task)
            return await self._reparse(task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug, a database outage: keep the task, not the worker
            log.exception("task %s: unexpected error", task.id)
            message = f"{type(exc).__name__}: {exc}"
            return await self._fail(task, "internal", message, trace=traceback.format_exc())
        finally:
            self.answered.discard(task.id)

    async def _hand_in(self, item: Finish) -> str | None:
        """``item`` written with its group; its task's status (None: taken away)."""
        item.last = self.last_out()
        self.writing += 1
        try:
            return await self.writer.finish(item)
        finally:
            self.writing -= 1

    def _request_over(self, task: ClaimedTask) -> None:
        """``task``'s request slot is free: its answer came, and its sticky session (if any)
        is given back."""
        self.answered.add(task.id)
        self.on_answered()

    async def run_fetched(
        self,
        task: ClaimedTask,
        started: datetime,
        outcome: FetchResponse | FetchError,
        *,
        gate_opened: bool = False,
        sticky: Lease | None = None,
    ) -> str | None:
        """Finish a task fetched elsewhere (a home-network agent: DESIGN.md decision 4).

        ``task`` is ``crawling`` under this pipeline's worker id; the page is stored and
        parsed exactly as after a local fetch, and ``sticky``, the session it was fetched
        through, given back as after one. Returns the status it ended in (None: lost).
        """
        gate = _Gate(self, task, gate_opened)
        try:
            if isinstance(outcome, FetchError):
                if sticky is not None:
                    await self.sessions.give_back(sticky, None, outcome)
                return await self._fetch_failed(task, None, started, outcome, gate)
            return await self._store_and_parse(task, None, started, outcome, gate, sticky=sticky)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug, a database outage: keep the task, not the hub
            log.exception("task %s: unexpected error", task.id)
            message = f"{type(exc).__name__}: {exc}"
            return await self._fail(task, "internal", message, trace=traceback.format_exc())
        finally:
            self.answered.discard(task.id)

    async def allowed_by_robots(self, task: ClaimedTask) -> bool:
        """The robots.txt check of the fetch phase, for a task about to go to an agent.

        A disallowed task fails ``robots_denied`` here, or waits while robots.txt is
        unreachable, as it would before a local fetch.
        """
        verdict = await self.policy.robots(task)
        if not verdict.allowed:
            await self._robots_refused(task, verdict)
        return verdict.allowed

    # -- fetch ------------------------------------------------------------------------------

    async def _crawl(self, task: ClaimedTask) -> str | None:
        if task.status == S.QUEUED:  # claimed without starting (not the worker pool's way)
            async with self.db.session() as session:
                if not await self.queue.start_crawl(session, task, self.worker_id):
                    return None
        verdict = await self.policy.robots(task)
        if not verdict.allowed:
            return await self._robots_refused(task, verdict)
        if verdict.fetched and task.crawl_delay_seconds > 0:
            await asyncio.sleep(task.crawl_delay_seconds)  # robots.txt took the domain's turn
        gate = _Gate(self, task)
        proxy: ProxyChoice | None = None
        sticky: Lease | None = None
        try:
            if task.sticky_sessions is not None:  # the session brings its bound proxy
                sticky = await self._take_session(task)
                proxy = sticky.proxy if sticky else None
            elif task.uses_proxies:
                proxy = await self._choose_proxy(task)
        except NoProxyAvailable as exc:
            return await self._no_proxy(task, exc, gate)
        if self.fetcher is None:
            raise RuntimeError("this pipeline has no fetcher (it only finishes fetched tasks)")
        started = utcnow()
        own = task.fetch_request or {}
        shopper = open_profile(
            task.domain_profile, own.get("profile"), self.box, job=task.job_profile
        )
        request = FetchRequest(
            task.url,
            shopper.user_agent or task.user_agent,
            proxy.url if proxy else None,
            headers=shopper.headers,
            cookies=shopper.cookies | (sticky.cookies if sticky else {}),
            method=own.get("method", "GET"),
            body=own["body"].encode() if "body" in own else None,
            body_type=own.get("body_type"),
            on_sent=gate.open if task.crawl_delay_seconds > 0 else None,
            fetcher=task.fetcher,
            wait_for_selector=task.wait_for_selector,
            jar=sticky.jar if sticky else None,
        )
        parsed: Parsed | None = None
        try:
            if sticky is not None and sticky.new:
                await self.sessions.warm(sticky, self.fetcher, request)
                request = replace(request, cookies=shopper.cookies | sticky.cookies)
            if task.fetcher == AUTO:  # the cheapest fetcher that works, parsed (issue 33)
                response, parsed = await self.escalation.climb(task, request)
            else:
                response = await self.fetcher.fetch(request)
        except FetchError as exc:
            if sticky is not None:
                await self.sessions.give_back(sticky, None, exc)
            self._request_over(task)
            return await self._fetch_failed(task, proxy, started, exc, gate)
        if sticky is None:  # a sticky session is in use until its page says how it went
            self._request_over(task)
        return await self._store_and_parse(task, proxy, started, response, gate, parsed, sticky)

    async def _take_session(self, task: ClaimedTask) -> Lease | None:
        """A sticky session for ``task``'s fetch (its proxy picked by the fetch policy)."""
        choose = None
        if task.uses_proxies:

            async def choose(session: AsyncSession, domain: DomainPolicy) -> ProxyChoice | None:
                return await self.policy.choose(session, task, domain)

        return await self.sessions.take(task, self.policy.owner(task), choose)

    async def _robots_refused(self, task: ClaimedTask, verdict: Verdict) -> str | None:
        """Disallowed: fail ``robots_denied``. Unreachable robots.txt (RFC 9309: nothing may be
        fetched): the try fails as the robots.txt fetch did (``network``, ``http_5xx`` …), so it
        is retried with back-off, not before robots.txt is asked again, and a dead site's tasks
        end failed after their retries instead of waiting for ever. The domain's gate stays
        closed meanwhile, so its other tasks are not claimed only to wait in turn."""
        reason = verdict.reason or "robots.txt disallows this URL"
        if verdict.retry_in is None:
            return await self._fail(task, "robots_denied", reason, open_gate=True)
        async with self.db.session() as session:
            await open_after(
                session, task.domain_id, max(verdict.retry_in, task.crawl_delay_seconds)
            )
        error = (verdict.error_type or "network", reason, None)
        ending = Ending(task, self.worker_id, LEASED, error=error, not_before=verdict.retry_in)
        return await self._hand_in(Finish(ending))

    async def _choose_proxy(self, task: ClaimedTask) -> ProxyChoice | None:
        async with self.db.session() as session:
            domain = await session.scalar(
                select(Domain)
                .where(Domain.id == task.domain_id)
                .options(defer(Domain.robots_txt_content))
            )
            if domain is None:  # deleted meanwhile (delete waits for in-flight tasks)
                return None
            return await self.policy.choose(session, task, DomainPolicy.of(domain))

    async def _no_proxy(self, task: ClaimedTask, exc: NoProxyAvailable, gate: _Gate) -> str | None:
        """No proxy may be used now: wait for one (no retry spent), or fail if none can serve."""
        if exc.retry_in is None:
            return await self._fail(task, "proxy", exc.message, open_gate=not gate.opened)
        async with self.db.session() as session:
            if not gate.opened:
                gate.opened = True
                await open_after(session, task.domain_id, task.crawl_delay_seconds)
            moved = await self.queue.postpone(
                session, task, self.worker_id, reason=exc.message, seconds=exc.retry_in
            )
        return S.PENDING if moved else None

    async def _fetch_failed(
        self,
        task: ClaimedTask,
        proxy: ProxyChoice | None,
        started: datetime,
        exc: FetchError,
        gate: _Gate,
    ) -> str | None:
        log.info("task %s: fetch failed (%s): %s", task.id, exc.error_type, exc.message)
        # The Finish judges the error (a block page is re-typed) and fails the ending with it.
        ending = Ending(
            task,
            self.worker_id,
            LEASED,
            fetch_attempt=_fetch_attempt(proxy, started, status_code=exc.status_code),
        )
        return await self._hand_in(
            Finish(ending, proxy=proxy, fetch_error=exc, open_gate=not gate.opened)
        )

    # -- store, parse, finish -----------------------------------------------------------------

    async def parse_fetched(
        self, task: ClaimedTask, response: FetchResponse, *, script_check: bool = False
    ) -> Parsed:
        """The fetched page stored and parsed by a parse process (``script_check``: say whether
        a page without a product looks rendered by scripts, ``Parsed.scripted``)."""
        follow = task.job_id is not None and task.job_action in ("follow", "sitemap")
        # A job's page: its listings' links, and those its parser gives (issue 32).
        policy = await self.link_policies.get(task.job_id) if task.job_id else None
        sitemaps: tuple[str, ...] = ()
        if follow and policy is not None and policy.robots_sitemaps and task.depth == 0:
            sitemaps = await self._robots_sitemaps(task.domain_id)
        job = ParseJob(
            task.url,
            task.parser_name,
            response.body,
            response.headers.get("content-type", ""),
            response.status_code,
            selector=task.selector,
            store=self.pages.pack_root(),
            links=policy,
            follow_only=follow,
            sitemap=task.job_action == "sitemap",
            robots_sitemaps=sitemaps,
            script_check=script_check,
        )
        return await self.parser.parse(job)

    async def _store_and_parse(
        self,
        task: ClaimedTask,
        proxy: ProxyChoice | None,
        started: datetime,
        response: FetchResponse,
        gate: _Gate,
        parsed: Parsed | None = None,
        sticky: Lease | None = None,
    ) -> str | None:
        """Finish a fetched page: parsed here, unless the caller did (``parse_fetched``); a
        sticky session given back with what the page says of it."""
        if parsed is None:
            parsed = await self.parse_fetched(task, response)
        ban = None
        if parsed.ban is not None:  # a robot check served as a page: a failed fetch
            kind, message = parsed.ban
            ban = FetchError(message, error_type=kind, status_code=response.status_code)
        if sticky is not None:  # the page says whether the session was blocked
            await self.sessions.give_back(sticky, response.cookies, ban)
            self._request_over(task)
        if ban is not None:
            return await self._fetch_failed(task, proxy, started, ban, gate)
        page_key, stored = parsed.page_key, parsed.page_bytes  # stored by the parse process
        store_error = parsed.store_error
        if parsed.page_gz is not None:
            try:
                page_key = await self.pages.put_gzip(task.url_hash, parsed.page_gz)
                stored = len(parsed.page_gz)
            except PageStoreError as exc:
                store_error = exc.message
        if store_error is not None:  # nothing recorded as stored; the task retries
            log.warning("task %s: page not stored: %s", task.id, store_error)
            return await self._fail(
                task, "internal", f"page not stored: {store_error}", open_gate=not gate.opened
            )
        error = (*parsed.error, None) if parsed.error else None
        proxy_id = proxy.proxy_id if proxy else None
        fetched = (page_key, response.status_code, response.elapsed_ms, proxy_id)
        attempt = _fetch_attempt(
            proxy, started, response=response, page_key=page_key, page_bytes=stored
        )
        ending = Ending(
            task,
            self.worker_id,
            [S.CRAWLING],
            error=error,
            via=FETCHED_VIA,
            fetched=fetched,
            fetch_attempt=attempt,
            trace=parsed.trace,
        )
        item = Finish(
            ending,
            record=_stamped(parsed.record),
            items=_provenance(parsed, task),
            proxy=proxy,
            answered_ms=response.elapsed_ms,
            open_gate=not gate.opened,
            discovery=_discovery(task, parsed),
        )
        return await self._hand_in(item)

    async def _robots_sitemaps(self, domain_id: int) -> tuple[str, ...]:
        """The domain's robots.txt ``Sitemap:`` lines (read before this fetch: the robots.txt
        check came first)."""
        async with self.db.reader() as session:
            found = await session.scalar(
                select(Domain.robots_txt_sitemaps).where(Domain.id == domain_id)
            )
        return tuple(found or ())

    async def _reparse(self, task: ClaimedTask) -> str | None:
        """A stored page parsed again (``restart-parsing``, an expired parse lease)."""
        if task.html_path is None:
            return await self._fail(task, "internal", "no stored page to parse")
        async with self.db.session() as session:
            if not await self.queue.to_parsing(session, task, self.worker_id):
                return None
        try:
            body = await self.pages.get(task.html_path)
        except PageStoreError as exc:
            unread = ("internal", exc.message, None)
            ending = Ending(task, self.worker_id, LEASED, error=unread, parse_page=task.html_path)
            return await self._hand_in(Finish(ending))
        job = ParseJob(
            task.url,
            task.parser_name,
            body,
            fetched=False,
            selector=task.selector,
            follow_only=task.job_action in ("follow", "sitemap"),  # its links were taken
        )
        parsed = await self.parser.parse(job)
        error = (*parsed.error, None) if parsed.error else None
        ending = Ending(
            task,
            self.worker_id,
            [S.PARSING],
            error=error,
            parse_page=task.html_path,
            trace=parsed.trace,
        )
        return await self._hand_in(
            Finish(
                ending,
                record=_stamped(parsed.record),
                items=_provenance(parsed, task),
            )
        )

    async def _fail(
        self,
        task: ClaimedTask,
        error_type: str,
        message: str,
        *,
        open_gate: bool = False,
        trace: str | None = None,
    ) -> str | None:
        ending = Ending(
            task, self.worker_id, LEASED, error=(error_type, message, None), trace=trace
        )
        return await self._hand_in(
            Finish(ending, open_gate=open_gate and task.crawl_delay_seconds > 0)
        )


def _fetch_attempt(
    proxy: ProxyChoice | None,
    started: datetime,
    *,
    response: FetchResponse | None = None,
    page_key: str | None = None,
    page_bytes: int | None = None,
    status_code: int | None = None,
) -> FetchAttempt:
    """What the worker saw of the request: the queue writes it as the try's attempt row."""
    return FetchAttempt(
        started_at=started,
        finished_at=utcnow(),
        proxy_id=proxy.proxy_id if proxy else None,
        status_code=response.status_code if response else status_code,
        response_time_ms=response.elapsed_ms if response else None,
        bytes_received=len(response.body) if response else None,
        final_url=response.url if response else None,
        page_path=page_key,
        page_bytes=page_bytes,
    )


def _discovery(task: ClaimedTask, parsed: Parsed) -> Discovery | None:
    """A crawl job's page: the links it gave, one level deeper than it (None: not a job's). A
    product page gives none, but its finish still checks the job's time (``queue/discovered``)."""
    if task.job_id is None:
        return None
    found_on, depth = task.id, (task.depth or 0) + 1
    return Discovery(task.job_id, found_on, depth, parsed.links, parsed.links_refused)


def _provenance(parsed: Parsed, task: ClaimedTask) -> ItemBatch | None:
    """The page's items with where they were read and by which parser (None: no items)."""
    if not parsed.items:
        return None
    if task.selector is not None:
        name, version = SELECTOR, str(task.selector[1])
    else:
        name, version = task.parser_name, ""
        with contextlib.suppress(UnknownParser):
            version = get_parser(task.parser_name).version
    return ItemBatch(parsed.items, task.url, name, version)


def _stamped(record: ProductRecord | None) -> ProductRecord | None:
    """The record with this process's version of its parser: the one ``restart-parsing``
    compares stored products against (the parse processes run the same code)."""
    if record is not None and record.parser_name != SELECTOR:  # a map's version is its own
        with contextlib.suppress(UnknownParser):
            record.parser_version = get_parser(record.parser_name).version
    return record
