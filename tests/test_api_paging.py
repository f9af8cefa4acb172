"""Task and product details are bounded; the rest comes a page at a time."""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest
from sqlalchemy import insert, select

from forager.api import products as products_api
from forager.api import tasks as tasks_api
from forager.db.models import Domain, Event, PriceHistory, Product


async def test_task_detail_shows_the_newest_events_and_pages_the_rest(
    api: httpx.AsyncClient,
) -> None:
    task_id = (await api.post("/api/tasks", json={"url": "https://p.example/1"})).json()["task"][
        "id"
    ]
    db = api.app.state.runtime.db  # type: ignore[attr-defined]
    extra = tasks_api.DETAIL_ROWS + 5
    async with db.session() as session:
        await session.execute(
            insert(Event),
            [
                {"entity_type": "task", "entity_id": str(task_id), "event": f"note-{n}"}
                for n in range(extra)
            ],
        )
    detail = (await api.get(f"/api/tasks/{task_id}")).json()
    assert (detail["events_total"], len(detail["events"])) == (extra + 1, tasks_api.DETAIL_ROWS)
    assert detail["events"][-1]["event"] == f"note-{extra - 1}"  # the newest, oldest first
    assert (detail["attempts_total"], detail["attempts"]) == (0, [])
    first = (await api.get(f"/api/tasks/{task_id}/events", params={"limit": 2})).json()
    assert [e["event"] for e in first["items"]] == ["created", "note-0"]
    last = await api.get(f"/api/tasks/{task_id}/events", params={"offset": extra, "limit": 5})
    assert [e["event"] for e in last.json()["items"]] == [f"note-{extra - 1}"]
    assert last.json()["total"] == extra + 1
    assert (await api.get("/api/tasks/424242/events")).status_code == 404
    assert (await api.get(f"/api/tasks/{task_id}/attempts")).json()["total"] == 0


async def test_product_detail_shows_the_newest_prices_and_pages_the_rest(
    api: httpx.AsyncClient,
) -> None:
    db = api.app.state.runtime.db  # type: ignore[attr-defined]
    points = products_api.DETAIL_ROWS + 3
    async with db.session() as session:
        domain = Domain(
            domain_name="p.example",
            base_url="https://p.example",
            parser_name="generic",
            user_agent="t",
        )
        session.add(domain)
        await session.flush()
        product = Product(
            domain_id=domain.id,
            url="https://p.example/1",
            url_hash="a" * 64,
            product_name="P",
            parser_name="generic",
            parser_version="2",
            content_hash="c",
        )
        session.add(product)
        await session.flush()
        await session.execute(
            insert(PriceHistory),
            [{"product_id": product.id, "price": Decimal(n)} for n in range(points)],
        )
        product_id = product.id
    detail = (await api.get(f"/api/products/{product_id}")).json()
    assert detail["price_history_total"] == points
    assert len(detail["price_history"]) == products_api.DETAIL_ROWS
    async with db.reader() as session:
        newest = await session.scalar(select(PriceHistory.price).order_by(PriceHistory.id.desc()))
    assert detail["price_history"][-1]["price"] == f"{newest:.2f}"
    page = (await api.get(f"/api/products/{product_id}/price-history", params={"limit": 3})).json()
    assert [p["price"] for p in page["items"]] == ["0.00", "1.00", "2.00"]
    assert page["total"] == points


async def test_tasks_sort_by_creation_or_last_update_in_either_direction(
    api: httpx.AsyncClient,
) -> None:
    ids = [
        (await api.post("/api/tasks", json={"url": f"https://sort.example/{n}"})).json()["task"][
            "id"
        ]
        for n in range(3)
    ]
    # The first one changes last: the newest update.
    assert (await api.post(f"/api/tasks/{ids[0]}/pause")).status_code == 200

    async def order(**params: str) -> list[int]:
        page = (await api.get("/api/tasks", params=params)).json()
        assert page["total"] == 3
        return [t["id"] for t in page["items"]]

    assert await order() == ids[::-1]
    assert await order(sort="created") == ids
    assert await order(sort="-updated") == [ids[0], ids[2], ids[1]]
    assert await order(sort="updated") == [ids[1], ids[2], ids[0]]
    assert await order(sort="-updated", url_contains="sort.example") == [ids[0], ids[2], ids[1]]
    assert await order(sort="created", limit="1", offset="1") == [ids[1]]
    refused = await api.get("/api/tasks", params={"sort": "price"})
    assert refused.status_code == 422


async def test_the_audit_log_counts_its_total_up_to_a_cap_past_the_page(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forager.api import events as events_api

    monkeypatch.setattr(events_api, "COUNT_CAP", 5)
    db = api.app.state.runtime.db  # type: ignore[attr-defined]
    async with db.session() as session:
        await session.execute(
            insert(Event),
            [{"entity_type": "x", "entity_id": str(n % 2), "event": f"e-{n}"} for n in range(12)],
        )

    async def listed(**params: object) -> tuple[int, bool, list[str]]:
        body = (await api.get("/api/events", params={"entity_type": "x", **params})).json()
        return body["total"], body["total_exact"], [e["event"] for e in body["items"]]

    # 12 match: more than 5 past offset 0, so 5 is a lower bound; the page is the newest.
    assert await listed(limit=2) == (5, False, ["e-11", "e-10"])
    assert (await listed(offset=4, limit=2))[:2] == (9, False)
    assert await listed(offset=8, limit=2) == (12, True, ["e-3", "e-2"])  # 4 past: exact
    assert await listed(offset=20) == (12, True, [])  # past the end: counted from the start
    assert await listed(entity_id="1", limit=1) == (5, False, ["e-11"])  # 6 match
    assert await listed(entity_id="1", offset=1, limit=1) == (6, True, ["e-9"])
    # No filter at all: the count still reads the events table (a bare SELECT 1 counted 1).
    everything = (await api.get("/api/events", params={"limit": 1})).json()
    assert (everything["total"], everything["total_exact"]) == (5, False)
