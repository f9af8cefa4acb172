"""One task through the phases of seed 004: fetch → store → parse → save.

``queued → crawling → downloaded → queued_parse → parsing → completed``; each arrow is a
compare-and-set on the worker's lease, so a task an operator paused or cancelled, or
whose lease expired, is dropped at the next boundary without touching its new state.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, Domain
from forager.db.types import utcnow
from forager.errors import FetchError, ForagerError, ParseError
from forager.fetch.base import Fetcher, FetchRequest, FetchResponse
from forager.fetch.policy import FetchPolicy
from forager.fetch.proxies import NoProxyAvailable, ProxyChoice
from forager.parse.base import ProductRecord
from forager.parse.registry import get_parser
from forager.products.persist import save_product
from forager.queue.lifecycle import TaskStatus
from forager.queue.store import ClaimedTask, TaskQueue, transition
from forager.store.pages import PageStore

log = logging.getLogger(__name__)
S = TaskStatus


class _Gate:
    """Reopens the task's domain once its request is sent (or, failing that, once it ends)."""

    def __init__(self, pipeline: Pipeline, task: ClaimedTask) -> None:
        self.queue = pipeline.queue
        self.db = pipeline.db
        self.task = task
        self.opened = task.crawl_delay_seconds <= 0  # no delay: the claim never closed it

    async def open(self) -> None:
        if not self.opened:
            self.opened = True
            async with self.db.session() as session:
                await self.queue.open_gate(session, self.task)

    async def open_if_closed(self, session: AsyncSession) -> None:
        if not self.opened:
            self.opened = True
            await self.queue.open_gate(session, self.task)


@dataclass(slots=True)
class _Fetched:
    attempt_id: int
    page_key: str


class Pipeline:
    """Runs claimed tasks to their next resting state; never raises for a task's failure."""

    def __init__(
        self,
        db: Database,
        queue: TaskQueue,
        fetcher: Fetcher,
        pages: PageStore,
        box: SecretBox | None,
        worker_id: str,
    ) -> None:
        self.db = db
        self.queue = queue
        self.fetcher = fetcher
        self.pages = pages
        self.box = box
        self.worker_id = worker_id
        # robots.txt, proxy choice and outcome bookkeeping (bans, breakers, throttling).
        self.policy = FetchPolicy(db, queue.settings, box, worker_id)

    async def run(self, task: ClaimedTask) -> str | None:
        """Process ``task``; returns the status it ended in (None: it was taken away)."""
        try:
            if task.status == S.QUEUED:
                fetched = await self._fetch_phase(task)
                if fetched is None:
                    return None
                return await self._parse_phase(task, fetched.page_key, fetched.attempt_id)
            if task.html_path is None:
                return await self._fail(task, None, "internal", "no stored page to parse")
            return await self._parse_phase(task, task.html_path, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug, a database outage: keep the task, not the worker
            log.exception("task %s: unexpected error", task.id)
            return await self._fail(task, None, "internal", f"{type(exc).__name__}: {exc}")

    async def run_fetched(
        self,
        task: ClaimedTask,
        started: object,
        outcome: FetchResponse | FetchError,
        *,
        gate_opened: bool = False,
    ) -> str | None:
        """Finish a task fetched elsewhere (a home-network agent: DESIGN.md decision 4).

        ``task`` is ``crawling`` under this pipeline's worker id; the page is stored and
        parsed exactly as after a local fetch. Returns the status it ended in (None: lost).
        """
        gate = _Gate(self, task)
        gate.opened = gate.opened or gate_opened
        try:
            if not isinstance(outcome, FetchError):
                outcome = self.policy.page_ban(outcome) or outcome  # a robot check as a page
            if isinstance(outcome, FetchError):
                return await self._record_fetch_failure(task, None, started, outcome, gate)
            fetched = await self._store_fetched(task, None, started, outcome, gate)
            if fetched is None:
                return None
            return await self._parse_phase(task, fetched.page_key, fetched.attempt_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug, a database outage: keep the task, not the hub
            log.exception("task %s: unexpected error", task.id)
            return await self._fail(task, None, "internal", f"{type(exc).__name__}: {exc}")

    async def allowed_by_robots(self, task: ClaimedTask) -> bool:
        """The robots.txt check of the fetch phase, for a task about to go to an agent.

        A disallowed task fails ``robots_denied`` here, as it would before a local fetch.
        """
        verdict = await self.policy.robots(task)
        if not verdict.allowed:
            await self._deny(task, verdict.reason or "robots.txt disallows this URL")
        return verdict.allowed

    # -- fetch --------------------------------------------------------------------------

    async def _fetch_phase(self, task: ClaimedTask) -> _Fetched | None:
        verdict = await self.policy.robots(task)
        if not verdict.allowed:
            await self._deny(task, verdict.reason or "robots.txt disallows this URL")
            return None
        if verdict.fetched and task.crawl_delay_seconds > 0:
            await asyncio.sleep(task.crawl_delay_seconds)  # robots.txt took the domain's turn
        async with self.db.session() as session:
            if not await self.queue.start_crawl(session, task, self.worker_id):
                return None
            # One read of the domain for the proxy policy and the fetcher (not its robots.txt).
            domain = await session.scalar(
                select(Domain)
                .where(Domain.id == task.domain_id)
                .options(defer(Domain.robots_txt_content))
            )
            if domain is None:  # deleted meanwhile (delete waits for in-flight tasks): drop it
                return None
            try:
                proxy = await self.policy.choose(session, task, domain)
            except NoProxyAvailable as exc:
                await self._no_proxy(session, task, exc)
                return None
            fetcher_kind, wait_for_selector = domain.fetcher, domain.wait_for_selector
        started = utcnow()
        gate = _Gate(self, task)
        request = FetchRequest(
            task.url,
            task.user_agent,
            proxy.url if proxy else None,
            on_sent=gate.open if task.crawl_delay_seconds > 0 else None,
            fetcher=fetcher_kind,
            wait_for_selector=wait_for_selector,
        )
        try:
            response = await self.fetcher.fetch(request)
        except FetchError as exc:
            await self._record_fetch_failure(task, proxy, started, exc, gate)
            return None
        ban = self.policy.page_ban(response)  # a robot check served as a page
        if ban is not None:
            await self._record_fetch_failure(task, proxy, started, ban, gate)
            return None
        return await self._store_fetched(task, proxy, started, response, gate)

    async def _deny(self, task: ClaimedTask, reason: str) -> None:
        """robots.txt forbids the URL: the task fails ``robots_denied`` without a request."""
        async with self.db.session() as session:
            await _Gate(self, task).open_if_closed(session)
            await self.queue.fail(
                session, task, self.worker_id, error_type="robots_denied", message=reason
            )

    async def _no_proxy(
        self, session: AsyncSession, task: ClaimedTask, exc: NoProxyAvailable
    ) -> None:
        """No proxy may be used now: wait for one (no retry spent), or fail if none can serve."""
        await _Gate(self, task).open_if_closed(session)
        if exc.retry_in is None:
            await self.queue.fail(
                session, task, self.worker_id, error_type="proxy", message=exc.message
            )
            return
        await transition(
            session,
            task.id,
            from_=[S.CRAWLING],
            to=S.PENDING,
            worker_id=self.worker_id,
            event="postponed",
            details={"reason": exc.message},
            scheduled_at=utcnow() + timedelta(seconds=exc.retry_in),
            started_at=None,
            lease_owner=None,
            lease_expires_at=None,
        )

    async def _store_fetched(
        self,
        task: ClaimedTask,
        proxy: ProxyChoice | None,
        started: object,
        response: FetchResponse,
        gate: _Gate,
    ) -> _Fetched | None:
        """Store the page, record the attempt and move ``crawling → parsing`` (None: lost)."""
        body = response.text.encode("utf-8")
        page_key = await self.pages.put(task.url_hash, body)
        async with self.db.session() as session:
            await gate.open_if_closed(session)
            attempt_id = await self._insert_attempt(
                session, task, proxy, started, response=response, page_key=page_key
            )
            await self.policy.succeeded(session, task, proxy, response)
            # The same worker parses at once: downloaded → queued_parse → parsing happen in
            # this one transaction, so a single compare-and-set carries all three events.
            if not await transition(
                session,
                task.id,
                from_=[S.CRAWLING],
                to=S.PARSING,
                via=[S.DOWNLOADED, S.QUEUED_PARSE],
                worker_id=self.worker_id,
                html_path=page_key,
                http_status_code=response.status_code,
                response_time_ms=response.elapsed_ms,
                proxy_id=proxy.proxy_id if proxy else None,
            ):
                await self._set_attempt(session, attempt_id, outcome="discarded")
                return None
        return _Fetched(attempt_id, page_key)

    async def _record_fetch_failure(
        self,
        task: ClaimedTask,
        proxy: ProxyChoice | None,
        started: object,
        exc: FetchError,
        gate: _Gate,
    ) -> str | None:
        log.info("task %s: fetch failed (%s): %s", task.id, exc.error_type, exc.message)
        async with self.db.session() as session:
            await gate.open_if_closed(session)
            # First: a 403/503 block page is re-typed ``blocked`` before it is recorded.
            retry_after = await self.policy.failed(session, task, proxy, exc)
            attempt_id = await self._insert_attempt(
                session, task, proxy, started, error=exc, status_code=exc.status_code
            )
            status = await self.queue.fail(
                session,
                task,
                self.worker_id,
                error_type=exc.error_type,
                message=exc.message,
                http_status_code=exc.status_code,
            )
            await self._set_attempt(session, attempt_id, outcome=_outcome(status))
            if retry_after and status == S.PENDING:
                await self.policy.not_before(session, task.id, retry_after)
        return status

    # -- parse --------------------------------------------------------------------------

    async def _parse_phase(
        self, task: ClaimedTask, page_key: str, attempt_id: int | None
    ) -> str | None:
        """Parse a stored page; ``attempt_id`` is set when the fetch phase already began it."""
        if attempt_id is None:
            async with self.db.session() as session:
                if not await transition(
                    session, task.id, from_=[S.QUEUED_PARSE], to=S.PARSING, worker_id=self.worker_id
                ):
                    return None
        try:
            html = (await self.pages.get(page_key)).decode("utf-8", errors="replace")
            parser = get_parser(task.parser_name)
            record: ProductRecord = await asyncio.to_thread(parser.parse, html, task.url)
        except ParseError as exc:
            return await self._fail(task, attempt_id, exc.error_type, exc.message, page_key)
        except ForagerError as exc:
            return await self._fail(task, attempt_id, "internal", exc.message, page_key)
        async with self.db.session() as session:
            if not await self.queue.complete(session, task, self.worker_id):
                return None
            await save_product(
                session,
                domain_id=task.domain_id,
                task_id=task.id,
                url=task.url,
                url_hash=task.url_hash,
                record=record,
            )
            if record.quality_issues:
                # Kept as extracted; the parse attempt says which validation rules it breaks.
                await self._insert_parse_attempt(
                    session,
                    task,
                    page_key,
                    outcome="validation",
                    error_type="validation",
                    error_message="; ".join(record.quality_issues),
                )
            elif attempt_id is None:
                await self._insert_parse_attempt(session, task, page_key, outcome="success")
        return S.COMPLETED

    async def _fail(
        self,
        task: ClaimedTask,
        attempt_id: int | None,
        error_type: str,
        message: str,
        page_key: str | None = None,
    ) -> str | None:
        async with self.db.session() as session:
            status = await self.queue.fail(
                session, task, self.worker_id, error_type=error_type, message=message
            )
            values = {
                "outcome": _outcome(status),
                "error_type": error_type,
                "error_message": message,
            }
            if attempt_id is not None:
                await self._set_attempt(session, attempt_id, **values)
            elif page_key is not None:
                await self._insert_parse_attempt(session, task, page_key, **values)
        return status

    # -- attempts -----------------------------------------------------------------------

    async def _insert_attempt(
        self,
        session: AsyncSession,
        task: ClaimedTask,
        proxy: ProxyChoice | None,
        started: object,
        *,
        response: FetchResponse | None = None,
        page_key: str | None = None,
        error: FetchError | None = None,
        status_code: int | None = None,
    ) -> int:
        result = await session.execute(
            insert(CrawlAttempt)
            .values(
                task_id=task.id,
                worker_id=self.worker_id,
                proxy_id=proxy.proxy_id if proxy else None,
                phase="fetch",
                started_at=started,
                finished_at=utcnow(),
                outcome="success" if error is None else "failed",
                status_code=response.status_code if response else status_code,
                response_time_ms=response.elapsed_ms if response else None,
                bytes_received=len(response.body) if response else None,
                final_url=response.url if response else None,
                page_path=page_key,
                error_type=error.error_type if error else None,
                error_message=error.message if error else None,
            )
            .returning(CrawlAttempt.id)
        )
        return int(result.scalar_one())

    async def _insert_parse_attempt(
        self, session: AsyncSession, task: ClaimedTask, page_key: str, **values: object
    ) -> None:
        now = utcnow()
        await session.execute(
            insert(CrawlAttempt).values(
                task_id=task.id,
                worker_id=self.worker_id,
                phase="parse",
                started_at=now,
                finished_at=now,
                page_path=page_key,
                **values,
            )
        )

    @staticmethod
    async def _set_attempt(session: AsyncSession, attempt_id: int, **values: object) -> None:
        await session.execute(
            update(CrawlAttempt).where(CrawlAttempt.id == attempt_id).values(**values)
        )


def _outcome(status: str | None) -> str:
    if status == S.PENDING:
        return "retry"
    return "failed" if status == S.FAILED else "discarded"
