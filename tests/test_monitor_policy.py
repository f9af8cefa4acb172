"""Issue 33: monitors under their domain's policy. A monitor of a known domain polls with its
request profile and user agent, through its proxy, under its crawl delay; the kill switch,
robots.txt and the domain's concurrency hold it back with the reason shown, and it polls again
by itself once the domain allows it. Both engines, the local test site and proxy."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import update

from forager.api.monitors import public
from forager.crypto import SecretBox
from forager.db.models import CrawlTask, Domain, Monitor
from forager.db.types import utcnow
from forager.domains import admin as domains
from forager.fetch.fetcher_set import FetcherSet
from forager.monitors import admin
from forager.monitors.runner import MonitorRunner
from forager.runtime import open_database
from forager.worker.parsing import ParsePool
from tests.conftest import SettingsFactory
from tests.support.crawling import add_proxy, submit
from tests.support.proxy import TestProxy
from tests.support.site import TestSite
from tests.support.waiting import eventually

HOST = "127.0.0.3"
FAST = {
    "monitor_claim_seconds": 0.1,
    "monitor_lease_seconds": 3.0,
    "monitor_retry_base_seconds": 0.01,
    "monitor_retry_max_seconds": 0.04,
}
PROFILE = {
    "headers": [{"name": "Accept-Language", "value": "de-DE"}],
    "cookies": [{"name": "zip", "value": "10115"}],
}


class Env:
    def __init__(self, settings: Any, db: Any, site: TestSite) -> None:
        self.settings, self.db, self.site = settings, db, site
        self.box = SecretBox(settings)
        self.fetchers = FetcherSet(settings)
        self.parser = ParsePool(settings)
        self.runner = MonitorRunner(
            db, settings, self.fetchers, self.parser, owner="policy-test", box=self.box
        )
        self.task: asyncio.Task[None] | None = None

    async def domain(self, **values: Any) -> Domain:
        base = self.site.url("/", host=HOST).rstrip("/")
        values = {"base_url": base, "crawl_delay_seconds": 0, **values}
        return await domains.create(self.db, self.settings, HOST, values, self.box)

    async def monitor(self, path: str, selectors: dict[str, str]) -> int:
        spec = admin.MonitorSpec(
            url=self.site.url(path, host=HOST),
            selector_type="json",
            selectors=selectors,
            interval_seconds=0.05,
            min_interval_seconds=0.05,
            max_interval_seconds=0.2,
        )
        return (await admin.create(self.db, self.settings, spec)).id

    async def row(self, monitor_id: int) -> Monitor:
        async with self.db.reader() as session:
            found = await session.get(Monitor, monitor_id)
            assert found is not None
            return found

    def start(self) -> None:
        self.task = asyncio.create_task(self.runner.run())


@pytest.fixture
async def env(make_settings: SettingsFactory, site: TestSite) -> AsyncIterator[Env]:
    settings = make_settings(**FAST)
    db = await open_database(settings)
    environment = Env(settings, db, site)
    try:
        yield environment
    finally:
        environment.runner.stop()
        if environment.task is not None:
            await asyncio.wait_for(environment.task, 30)
        await environment.parser.aclose()
        await environment.fetchers.aclose()
        await db.dispose()


async def _snapshot(env: Env, monitor_id: int) -> Monitor | None:
    row = await env.row(monitor_id)
    return row if row.total_changes >= 1 else None


async def test_a_monitor_polls_with_the_domains_profile_and_proxy_and_its_kill_switch_pauses_it(
    env: Env,
) -> None:
    domain = await env.domain(
        user_agent="shopper-monitor/1", request_profile=PROFILE, crawl_delay_seconds=0.2
    )
    with TestProxy(username="u", password="p") as proxy:
        await add_proxy(env.db, env.settings, proxy, domain.id)
        fields = {"lang": "accept-language", "cookie": "cookie", "agent": "user-agent"}
        monitor_id = await env.monitor("/echo-headers", fields)
        env.start()
        await eventually(lambda: _snapshot(env, monitor_id), "a first snapshot")
        assert proxy.count >= 1  # every poll went through the domain's proxy
        echoed = [h for host, h in env.site.state.echoed if host == HOST]
        assert echoed[0]["accept-language"] == "de-DE" and echoed[0]["cookie"] == "zip=10115"
        assert echoed[0]["user-agent"] == "shopper-monitor/1"
        # The crawl delay holds between polls: each request left at least 0.2 s after the last.
        starts = [r.start for r in env.site.requests(host=HOST) if r.path == "/echo-headers"]
        assert all(b - a >= 0.19 for a, b in itertools.pairwise(starts)), starts

        await domains.set_active(env.db, domain.id, False)

        async def paused() -> Monitor | None:
            row = await env.row(monitor_id)
            return row if row.status == "paused" and row.held_reason else None

        row = await eventually(paused, "the monitor held by its domain's kill switch")
        assert row.held_reason is not None and row.held_reason.startswith("domain_inactive:")
        shown = public(row, env.settings, utcnow())  # what GET /api/monitors/{id} answers
        assert shown.status == "paused" and shown.held_reason == row.held_reason
        polls = row.total_polls
        await asyncio.sleep(0.3)  # held: several intervals pass without a poll
        assert (await env.row(monitor_id)).total_polls == polls

        await domains.set_active(env.db, domain.id, True)

        async def polling_again() -> Monitor | None:
            row = await env.row(monitor_id)
            return row if row.total_polls > polls and row.held_reason is None else None

        row = await eventually(polling_again, "polls once the domain is active again")
        assert row.status == "active"


async def test_robots_txt_and_the_domains_concurrency_hold_a_monitor_back(env: Env) -> None:
    env.site.set_robots("User-agent: *\nDisallow: /live/\n")
    await env.domain(max_concurrent_requests=1)
    env.site.set_live("score", 1)
    monitor_id = await env.monitor("/live/score", {"value": "value"})
    env.start()

    async def held() -> Monitor | None:
        row = await env.row(monitor_id)
        return row if row.held_reason else None

    row = await eventually(held, "the monitor held by robots.txt")
    assert row.held_reason is not None and row.held_reason.startswith("robots:")
    assert row.total_polls == 0
    assert not [r for r in env.site.requests(host=HOST) if r.path.startswith("/live/")]

    # Allowed by robots.txt, but a task of the domain is in flight at its concurrency of 1.
    async with env.db.session() as session:
        await session.execute(update(Domain).values(ignore_robots=True))
    [task_id] = await submit(env.db, env.settings, env.site.url("/product/1", host=HOST))
    async with env.db.session() as session:
        await session.execute(
            update(CrawlTask).where(CrawlTask.id == task_id).values(status="crawling")
        )

    async def by_concurrency() -> Monitor | None:
        row = await env.row(monitor_id)
        return row if (row.held_reason or "").startswith("concurrency:") else None

    await eventually(by_concurrency, "the monitor held by the domain's concurrency")
    async with env.db.session() as session:
        await session.execute(
            update(CrawlTask).where(CrawlTask.id == task_id).values(status="completed")
        )
    await eventually(lambda: _snapshot(env, monitor_id), "a poll once the slot is free")
