"""``proxies.max_requests_per_hour`` is enforced by proxy selection, across processes."""

from __future__ import annotations

import multiprocessing
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Domain, DomainProxy, Proxy
from forager.db.types import utcnow
from forager.proxies.selection import DomainPolicy, NoProxyAvailable, choose_proxy
from forager.runtime import open_database


async def _setup(db: Database, budgets: list[int]) -> tuple[int, list[int]]:
    async with db.session() as session:
        domain = Domain(
            domain_name="hourly.test",
            base_url="http://hourly.test",
            parser_name="generic",
            user_agent="test",
        )
        proxies = [
            Proxy(proxy_url=f"10.0.0.{n}", proxy_port=8000 + n, max_requests_per_hour=budget)
            for n, budget in enumerate(budgets)
        ]
        session.add_all([domain, *proxies])
        await session.flush()
        session.add_all(DomainProxy(domain_id=domain.id, proxy_id=p.id) for p in proxies)
        return domain.id, [p.id for p in proxies]


def _pick_loop(database_url: str, domain_id: int, rounds: int, out: str) -> None:
    """One process: pick ``rounds`` times; write the picked proxy ids (or '-' when refused)."""
    import asyncio

    from forager.config import load_settings

    async def main() -> list[str]:
        settings = load_settings(database_url=database_url, data_dir=Path(out).parent)
        db = await open_database(settings, migrate=False)
        picks = []
        try:
            for _ in range(rounds):
                try:
                    async with db.session() as session:
                        choice = await choose_proxy(
                            session, DomainPolicy(domain_id), settings, None, owner="w"
                        )
                    picks.append(str(choice.proxy_id if choice else "direct"))
                except NoProxyAvailable:
                    picks.append("-")
        finally:
            await db.dispose()
        return picks

    Path(out).write_text(" ".join(asyncio.run(main())))


async def test_processes_share_each_proxys_hourly_budget(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    domain_id, (small, large) = await _setup(db, [3, 5])
    context = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"picks-{n}" for n in range(3)]
    workers = [
        context.Process(
            target=_pick_loop, args=(settings.resolved_database_url, domain_id, 5, str(out))
        )
        for out in outs
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    picks = [p for out in outs for p in out.read_text().split()]
    # 15 attempts, 8 requests' worth of budget: exactly 8 picks, the rest refused.
    assert sorted(picks) == sorted([str(small)] * 3 + [str(large)] * 5 + ["-"] * 7)
    async with db.reader() as session:
        rows = await session.execute(select(Proxy.id, Proxy.hour_requests))
        used = {row.id: row.hour_requests for row in rows}
    assert used == {small: 3, large: 5}


async def test_the_budget_comes_back_when_the_hour_is_over(
    db: Database, settings: Settings
) -> None:
    domain_id, [proxy_id] = await _setup(db, [2])
    policy = DomainPolicy(domain_id)
    for _ in range(2):
        async with db.session() as session:
            choice = await choose_proxy(session, policy, settings, None, owner="w")
            assert choice is not None and choice.proxy_id == proxy_id
    with pytest.raises(NoProxyAvailable, match="max_requests_per_hour") as refused:
        async with db.session() as session:
            await choose_proxy(session, policy, settings, None, owner="w")
    assert 3500 < (refused.value.retry_in or 0) <= 3600  # until the window ends
    async with db.session() as session:
        await session.execute(
            update(Proxy).values(hour_started_at=utcnow() - timedelta(hours=1, seconds=1))
        )
    async with db.session() as session:
        choice = await choose_proxy(session, policy, settings, None, owner="w")
        assert choice is not None
    async with db.reader() as session:
        assert await session.scalar(select(Proxy.hour_requests)) == 1  # a new window
