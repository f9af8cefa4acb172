"""The image downloader: a worker pool side task that stores the product images of domains with
``download_images`` on, through the page path's fetch rules — never a task of its own.

Images are not crawl tasks (``crawl_tasks`` stays one row per page URL, written by ``queue/``
only): their state is on ``product_images`` (``forager.products.images``). Every
``FORAGER_IMAGE_POLL_SECONDS`` each worker reads the domains that download images (none: that
one read is all) and leases a few due images; each is fetched like a page:

- the domain's politeness gate is taken (``politeness.gate.take``) and reopened once the
  request is on the wire, so images and pages of a domain together keep its crawl delay;
- robots.txt is checked for images on the domain's own host;
- the domain's proxy choice (``choose_proxy``) and the outcome's bookkeeping (proxy health,
  breaker, throttling: ``FetchPolicy.succeeded`` / ``failed``);
- the domain's fetcher (``impersonate`` for a ``browser`` domain), with the egress policy's
  submitted host being the product page's: an image URL cannot reach a private address the
  page's host could not;
- the domain's request profile (headers, cookies, user agent), ``Accept`` being an image's;
- at most ``FORAGER_IMAGE_MAX_BYTES``, refused while downloading past it.

The bytes must be an image by their header *and* their content (``imagefile.inspect``); they
are stored once per SHA-256 (``images/ab/<sha256>.<ext>``) in the page store.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import Domain
from forager.db.types import utcnow
from forager.domains.profile import open_profile
from forager.errors import FetchError, PageStoreError, effect
from forager.fetch.base import Fetcher, FetchRequest
from forager.fetch.fetcher_set import for_files
from forager.politeness.gate import open_after, take
from forager.politeness.throttle import effective_delay
from forager.products import images
from forager.products.imagefile import NotAnImage, inspect
from forager.proxies.selection import DomainPolicy, NoProxyAvailable, ProxyChoice, choose_proxy
from forager.queue.door import TaskQueue
from forager.store.pages import PageStore, image_key
from forager.worker.policy import FetchPolicy

log = logging.getLogger(__name__)

ACCEPT = "image/avif,image/webp,image/png,image/jpeg,image/*;q=0.8"
# The longest a leased image waits for its domain's turn before it is given back.
_TURN_WAIT_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class ImageFetch:
    """An image as the fetch policy sees it (its ``PolicyTask``)."""

    id: int
    domain_id: int
    url: str
    user_agent: str
    ignore_robots: bool
    domain_name: str
    robots_fetched_at: datetime | None


class ImageDownloader:
    """One per worker pool; ``step`` downloads what is due now."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        box: SecretBox,
        fetcher: Fetcher,
        pages: PageStore,
        worker_id: str,
    ) -> None:
        self.db = db
        self.settings = settings
        self.box = box
        self.fetcher = fetcher
        self.pages = pages
        self.worker_id = worker_id
        self.queue = TaskQueue(db, settings)  # the domains' politeness gates
        self.policy = FetchPolicy(db, settings, box, worker_id, fetcher=fetcher)
        self.lease_seconds = max(settings.lease_seconds, 2 * settings.fetch_timeout_seconds)
        self.lease_seconds += _TURN_WAIT_SECONDS

    async def step(self) -> int:
        """Download the images due now (a batch); how many were tried."""
        async with self.db.reader() as session:
            domains = await images.downloading_domains(session)
        if not domains:
            return 0
        async with self.db.session() as session:
            due = await images.claim(
                session, list(domains), self.settings.image_concurrency * 4, self.lease_seconds
            )
        by_domain: dict[int, list[images.DueImage]] = defaultdict(list)
        for image in due:
            by_domain[image.domain_id].append(image)
        gate = asyncio.Semaphore(self.settings.image_concurrency)
        await asyncio.gather(
            *(self._domain(domains[d], queue, gate) for d, queue in by_domain.items())
        )
        return len(due)

    async def _domain(
        self, domain: Domain, queue: list[images.DueImage], gate: asyncio.Semaphore
    ) -> None:
        delay = effective_delay(domain.crawl_delay_seconds, domain.throttle_delay_seconds)
        if delay <= 0:  # no turn to wait for: up to the concurrency at once
            await asyncio.gather(*(self._limited(domain, image, 0.0, gate) for image in queue))
            return
        for index, image in enumerate(queue):  # one at a time, each taking the domain's turn
            if not await self._wait_turn(domain.id):
                async with self.db.session() as session:
                    await images.release(session, [i.id for i in queue[index:]])
                return
            await self._limited(domain, image, delay, gate)

    async def _wait_turn(self, domain_id: int) -> bool:
        waited = 0.0
        while True:
            async with self.db.session() as session:
                opens = await take(session, domain_id, self.lease_seconds)
            if opens is None:
                return True
            pause = max(0.01, (opens - utcnow()).total_seconds())
            if waited + pause > _TURN_WAIT_SECONDS:
                return False
            waited += pause
            await asyncio.sleep(pause)

    async def _limited(
        self, domain: Domain, image: images.DueImage, delay: float, gate: asyncio.Semaphore
    ) -> None:
        async with gate:
            try:
                await self._one(domain, image, delay)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug or an outage: this image waits, the others go on
                log.exception("image %s: unexpected error", image.id)
                await self._failed(image, f"internal: {type(exc).__name__}: {exc}", True)

    async def _one(self, domain: Domain, image: images.DueImage, delay: float) -> None:
        same_host = urlsplit(image.url).hostname == domain.domain_name
        job = ImageFetch(
            image.id,
            domain.id,
            image.url,
            domain.user_agent,
            domain.ignore_robots or not same_host,  # robots.txt of another host is not read
            domain.domain_name,
            domain.robots_txt_last_fetched,
        )
        opened = False

        async def reopen() -> None:
            nonlocal opened
            if delay > 0 and not opened:
                opened = True
                async with self.db.session() as session:
                    await open_after(session, domain.id, delay)

        try:
            verdict = await self.policy.robots(job)
            if not verdict.allowed:
                await reopen()
                reason = verdict.reason or "robots.txt disallows this URL"
                if verdict.retry_in is not None:  # robots.txt unreachable: the image waits
                    async with self.db.session() as session:
                        await images.postpone(session, image.id, reason, verdict.retry_in)
                    return
                await self._failed(image, reason, False)
                return
            if verdict.fetched and delay > 0:
                await asyncio.sleep(delay)  # robots.txt took the domain's turn (as for pages)
            try:
                async with self.db.session() as session:
                    proxy = await choose_proxy(
                        session,
                        DomainPolicy.of(domain),
                        self.settings,
                        self.box,
                        owner=f"{self.worker_id}:image:{image.id}",
                    )
            except NoProxyAvailable as exc:
                await reopen()
                if exc.retry_in is None:  # no usable proxy at all
                    await self._failed(image, f"proxy: {exc.message}", False)
                    return
                # Busy or over its hourly budget now (or its row locked by another fetch's
                # bookkeeping for a moment): not a try of this image; it waits, as a page does.
                async with self.db.session() as session:
                    await images.postpone(session, image.id, f"proxy: {exc.message}", exc.retry_in)
                return
            await self._fetch(domain, image, job, proxy, reopen)
        finally:
            await reopen()

    async def _fetch(
        self,
        domain: Domain,
        image: images.DueImage,
        job: ImageFetch,
        proxy: ProxyChoice | None,
        reopen: Callable[[], Awaitable[None]],
    ) -> None:
        # The domain's request profile, as its pages get it (a shop may serve images only to
        # a shopper's cookie or header); Accept stays an image's.
        shopper = open_profile(domain.request_profile, None, self.box)
        headers = {k: v for k, v in shopper.headers.items() if k.lower() != "accept"}
        request = FetchRequest(
            image.url,
            shopper.user_agent or domain.user_agent,
            proxy.url if proxy else None,
            headers=headers | {"Accept": ACCEPT},
            cookies=shopper.cookies,
            on_sent=reopen,
            fetcher=for_files(domain.fetcher, domain.auto_fetcher),
            max_bytes=self.settings.image_max_bytes,
            submitted_url=image.product_url,
        )
        try:
            response = await self.fetcher.fetch(request)
        except FetchError as exc:
            async with self.db.session() as session:
                await self.policy.failed(session, job, proxy, exc)
            may_pass = effect(exc.error_type).retry
            await self._failed(image, f"{exc.error_type}: {exc.message}", may_pass)
            return
        async with self.db.session() as session:
            await self.policy.succeeded(session, job, proxy, response.elapsed_ms)
        declared = response.headers.get("content-type", "")
        try:
            found = await asyncio.to_thread(
                inspect, response.body, declared, self.settings.image_max_pixels
            )
        except NotAnImage as exc:
            await self._failed(image, f"not an image: {exc}", False)
            return
        async with self.db.reader() as session:
            key = await images.stored_key(session, found.content_hash)
        if key is None:  # the first of these bytes: store them
            key = image_key(found.content_hash, found.extension)
            try:
                await self.pages.put_blob(key, response.body, found.content_type)
            except PageStoreError as exc:
                await self._failed(image, f"image not stored: {exc.message}", True)
                return
        async with self.db.session() as session:
            await images.stored(session, image.id, key, found)

    async def _failed(self, image: images.DueImage, error: str, may_pass: bool) -> None:
        log.info("image %s (%s): %s", image.id, image.url, error)
        retry_in = None
        if may_pass and image.attempts + 1 < self.settings.image_max_attempts:
            base = self.settings.retry_base_seconds
            retry_in = min(self.settings.retry_max_seconds, base * 2**image.attempts)
        async with self.db.session() as session:
            await images.failed(session, image.id, error, retry_in)
