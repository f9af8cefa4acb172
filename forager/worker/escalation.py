"""Fetcher escalation (issue 33): an ``auto`` domain's page fetched with the cheapest fetcher
that works, climbing within one try.

A fetch starts with the fetcher the domain remembers (``forager.domains.escalation``: http
until something else worked) — or, once the probe interval has passed, with the cheapest, which
one process at a time takes. It climbs to the next fetcher when the site refuses this one (a
block or challenge page, a 403) and straight to the browser when the page has no product and
looks filled in by its scripts (``forager.parse.scripted``). The fetcher whose page was taken is
remembered when it differs from the remembered one, with why the cheaper ones failed; a climb
for scripts is remembered only when the browser's page then has the product, so a page that has
none either way does not make a domain's fetches dear. Nothing worked (every fetcher refused):
nothing is remembered, and the last failure is the try's.

Between two fetches of one try the worker waits the domain's crawl delay, as it does after
fetching robots.txt. Only the last fetch is the try's attempt row and its proxy outcome; a page
the parse process stored before the climb stays in its pack unreferenced.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from forager.config import Settings
from forager.db.engine import Database
from forager.db.types import utcnow
from forager.domains import escalation as memory
from forager.errors import FetchError
from forager.fetch.base import Fetcher, FetchRequest, FetchResponse
from forager.parse.classify import classify
from forager.queue.door import ClaimedTask
from forager.worker.parsing import Parsed

log = logging.getLogger(__name__)

RUNGS = memory.RUNGS
BROWSER = RUNGS[-1]
ParseFetched = Callable[..., Awaitable[Parsed]]
# Statuses a site refuses a client with: a 403 always, a 503 when its body is a block page.
_REFUSED = 403
_MAYBE_REFUSED = 503


class Escalation:
    """The climb of one process's pipeline; the memory is the database's."""

    def __init__(
        self, db: Database, settings: Settings, fetcher: Fetcher | None, parse: ParseFetched
    ) -> None:
        self.db = db
        self.interval = settings.fetcher_probe_seconds
        self.fetcher = fetcher
        self.parse = parse

    async def climb(self, task: ClaimedTask, request: FetchRequest) -> tuple[FetchResponse, Parsed]:
        """The page and its parse, from the cheapest fetcher that works; raises the last
        fetcher's ``FetchError`` when none did."""
        if self.fetcher is None:
            raise RuntimeError("this pipeline has no fetcher (it only finishes fetched tasks)")
        known = await memory.remembered(self.db, task.domain_id)
        probe = known.probe_due(utcnow()) and await memory.claim_probe(
            self.db, task.domain_id, known, self.interval
        )
        rung = memory.CHEAPEST if probe else known.rung
        failed: list[str] = []  # "fetcher: why", the cheaper ones that did not work
        for_scripts = False
        while True:
            last = rung == BROWSER
            try:
                response = await self.fetcher.fetch(dataclasses.replace(request, fetcher=rung))
            except FetchError as exc:
                refusal = None if last else _refusal(exc)
                if refusal is None:
                    await self._nothing_better(task, known, probe, failed)
                    raise
                failed.append(f"{rung}: {refusal}")
                rung = RUNGS[RUNGS.index(rung) + 1]
                await self._pause(task)
                continue
            parsed = await self.parse(task, response, script_check=not last)
            if parsed.ban is not None and not last:
                failed.append(f"{rung}: {parsed.ban[1]}")
                rung = RUNGS[RUNGS.index(rung) + 1]
                await self._pause(task)
                continue
            if parsed.scripted is not None and not last:
                failed.append(f"{rung}: {parsed.scripted}")
                rung, for_scripts = BROWSER, True
                await self._pause(task)
                continue
            worked = parsed.ban is None and (not for_scripts or _has_product(parsed))
            if worked:
                await self._worked(task, known, rung, probe, failed)
            else:
                await self._nothing_better(task, known, probe, failed)
            return response, parsed

    async def _worked(
        self, task: ClaimedTask, known: memory.Memory, rung: str, probe: bool, failed: list[str]
    ) -> None:
        if rung == known.rung:
            if probe:
                await memory.probe_kept(self.db, task.domain_id, rung, _why(failed), url=task.url)
            return
        reason = _why(failed) if failed else f"{rung} works again (probe)"
        moved = await memory.remember(
            self.db,
            task.domain_id,
            known.rung,
            rung,
            reason,
            url=task.url,
            probe=probe,
            interval=self.interval,
        )
        if moved:
            log.info("%s: fetcher %s -> %s (%s)", task.domain_name, known.rung, rung, reason)

    async def _nothing_better(
        self, task: ClaimedTask, known: memory.Memory, probe: bool, failed: list[str]
    ) -> None:
        if probe:
            reason = _why(failed) or "no cheaper fetcher worked"
            await memory.probe_kept(self.db, task.domain_id, known.rung, reason, url=task.url)

    async def _pause(self, task: ClaimedTask) -> None:
        """The domain's crawl delay between two fetches of one try."""
        if task.crawl_delay_seconds > 0:
            await asyncio.sleep(task.crawl_delay_seconds)


def _refusal(exc: FetchError) -> str | None:
    """Why ``exc`` says the site refused this client (None: it says something else — a dead
    site, a 404 — that another fetcher would not change). ``exc`` is left as it is: the
    try's failure is judged once, by the writer's ``Finish``."""
    if exc.error_type in ("blocked", "captcha"):
        return exc.message
    body = getattr(exc, "body", None)
    if exc.status_code in (_REFUSED, _MAYBE_REFUSED) and body:
        found = classify(body.decode("utf-8", errors="replace"))
        if found is not None:
            return f"status {exc.status_code}, {found[1]}"
    if exc.status_code == _REFUSED:
        return "status 403"
    return None


def _has_product(parsed: Parsed) -> bool:
    return parsed.record is not None and parsed.record.price is not None


def _why(failed: list[str]) -> str:
    return "; ".join(failed)
