"""Background re-test of proxies that their failures disabled, with exponential backoff.

A proxy disabled by ``FORAGER_PROXY_FAILURE_LIMIT`` consecutive failures carries
``retest_at``. The scheduler side task of every worker calls ``retest_due``: each due proxy is
claimed with a compare-and-set on ``retest_at`` (so one process tests it), then
``FORAGER_PROXY_TEST_URL`` is fetched through it. A pass (the proxy worked, judged as every
fetch through a proxy is: ``proxies.health.verdict``) enables it again with fresh counters
and a closed breaker; a failure doubles the wait (up to ``FORAGER_PROXY_RETEST_MAX_SECONDS``).
A proxy an operator disabled has no ``retest_at`` and is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select, update

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import Proxy
from forager.db.types import utcnow
from forager.errors import FetchError
from forager.fetch.base import Fetcher, FetchRequest
from forager.proxies.health import verdict
from forager.proxies.selection import proxy_url


@dataclass(frozen=True, slots=True)
class RetestResult:
    enabled: list[int]
    still_failing: list[int]


def backoff_seconds(settings: Settings, failed_retests: int) -> float:
    """Wait before the next re-test after ``failed_retests`` failed ones."""
    wait: float = settings.proxy_retest_base_seconds * 2**failed_retests
    return min(wait, settings.proxy_retest_max_seconds)


async def _claim(db: Database, settings: Settings, limit: int) -> list[Proxy]:
    now = utcnow()
    hold = now + timedelta(seconds=settings.fetch_timeout_seconds * 2)
    claimed: list[Proxy] = []
    async with db.session() as session:
        due = await session.scalars(
            select(Proxy)
            .where(Proxy.is_active.is_(False), Proxy.retest_at <= now)
            .order_by(Proxy.retest_at)
            .limit(limit)
        )
        for proxy in list(due):
            result = await session.execute(
                update(Proxy)
                .where(Proxy.id == proxy.id, Proxy.is_active.is_(False), Proxy.retest_at <= now)
                .values(retest_at=hold)  # ours while we test it; reset below either way
                .execution_options(synchronize_session=False)
            )
            if getattr(result, "rowcount", 0):
                claimed.append(proxy)
    return claimed


async def retest_due(
    db: Database, settings: Settings, box: SecretBox | None, fetcher: Fetcher, limit: int = 20
) -> RetestResult:
    """Test every disabled proxy whose re-test is due, with the HTTP fetcher of the process's
    ``fetcher`` set; enable those that work."""
    proxies = await _claim(db, settings, limit)
    if not proxies:
        return RetestResult([], [])
    enabled: list[int] = []
    failing: list[int] = []
    for proxy in proxies:
        request = FetchRequest(
            settings.proxy_test_url, settings.user_agent, proxy_url(proxy, box), fetcher="http"
        )
        error: str | None = None
        try:
            await fetcher.fetch(request)
        except FetchError as exc:
            error = exc.error_type
        now = utcnow()
        async with db.session() as session:
            if verdict(error) == "ok":
                values: dict[str, object] = {
                    "is_active": True,
                    "failure_count": 0,
                    "retest_at": None,
                    "retest_count": 0,
                    "last_success_at": now,
                    "breaker_state": "closed",
                    "breaker_failures": 0,
                    "breaker_successes": 0,
                    "breaker_opened_at": None,
                }
                enabled.append(proxy.id)
                event = "reenabled"
                details: dict[str, object] = {"by": "retest"}
            else:
                wait = backoff_seconds(settings, proxy.retest_count + 1)
                values = {
                    "retest_at": now + timedelta(seconds=wait),
                    "retest_count": Proxy.retest_count + 1,
                    "last_failure_at": now,
                }
                failing.append(proxy.id)
                event = "retest_failed"
                details = {"error_type": error, "next_in_s": wait}
            await session.execute(
                update(Proxy)
                .where(Proxy.id == proxy.id, Proxy.is_active.is_(False))
                .values(**values, last_test_at=now, last_test_ok=verdict(error) == "ok")
                .execution_options(synchronize_session=False)
            )
            audit.record(session, "proxy", [proxy.id], event, details)
    return RetestResult(enabled, failing)
