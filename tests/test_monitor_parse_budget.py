"""A live monitor's page is read in the parse processes, under their time budget (issue 30).

The real app with its built-in workers runs the monitor; the page it watches makes the
monitor's parser spin. That poll fails ``parse`` on the budget, the API answers meanwhile, the
spinning process is replaced, and the next poll of a readable page is stored.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from forager.apikeys import create_key
from forager.app import create_app
from forager.parse import registry
from forager.parse.base import ProductRecord
from tests.conftest import SettingsFactory
from tests.support.site import TestSite
from tests.support.waiting import eventually


class SpinningWhenAsked:
    """A monitor's parser that reads ``value`` from the live JSON page, and spins in pure
    Python (like a catastrophic regex) while that value is ``"spin"``."""

    name = "spin-on-ask"
    version = "1"

    def parse(self, html: str, url: str) -> ProductRecord:
        value = json.loads(html)["value"]
        while value == "spin":
            pass
        return ProductRecord(
            url=url,
            product_name=f"score {value}",
            price=Decimal(1),
            currency="USD",
            parser_name=self.name,
            parser_version=self.version,
        )


# Registered on import: here, and in each parse process (``parser_modules``).
registry.register(SpinningWhenAsked())


@pytest.fixture
async def serving(make_settings: SettingsFactory) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with built-in workers (so its own monitor runner) and a parse budget of
    three seconds (a page that parses in milliseconds keeps within it however loaded the
    machine is)."""
    settings = make_settings(
        serve_workers=1,
        parse_timeout_seconds=3.0,
        parse_processes=1,
        parser_modules=["tests.test_monitor_parse_budget"],
        monitor_claim_seconds=0.2,
        monitor_lease_seconds=5.0,
        monitor_retry_base_seconds=0.05,
        monitor_retry_max_seconds=0.2,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        _, key = await create_key(app.state.runtime.db, "test-admin", "admin")
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://forager.test",
            headers={"Authorization": f"Bearer {key}"},
        ) as client:
            yield client


async def test_a_monitor_page_over_the_parse_budget_fails_parse_and_the_next_poll_works(
    serving: httpx.AsyncClient, site: TestSite
) -> None:
    site.set_live("match", "spin")
    created = await serving.post(
        "/api/monitors",
        json={
            "url": site.url("/live/match"),
            "parser_name": "spin-on-ask",
            "interval_seconds": 0.5,
            "min_interval_seconds": 0.5,
            "max_interval_seconds": 1.0,
        },
    )
    assert created.status_code == 201, created.text
    monitor_id = created.json()["id"]

    async def errors() -> list[dict[str, Any]]:
        page = await serving.get("/api/monitor-errors", params={"monitor_id": monitor_id})
        assert page.status_code == 200, page.text
        items: list[dict[str, Any]] = page.json()["items"]
        return items

    await eventually(
        lambda: any(r.path == "/live/match" for r in site.requests()),
        "the page to be fetched and handed to the spinning parser",
    )
    health = await serving.get("/health")  # answered while the parse process spins
    assert health.status_code == 200

    [first, *_] = await eventually(errors, "the spinning poll to fail")
    assert (first["error_type"], first["category"]) == ("parse", "parsing")
    assert "longer than the budget of 3 s" in (first["error_message"] or "")
    assert first["resolved"] is False

    # The page reads fine again: a retry (or the next cycle) is parsed by a fresh process.
    site.set_live("match", 7)

    async def data() -> dict[str, Any] | None:
        answer = await serving.get(f"/api/monitors/{monitor_id}/data")
        return answer.json() if answer.status_code == 200 else None

    stored = await eventually(data, "the readable page to be stored")
    assert stored["product_name"] == "score 7"
    resolved = await eventually(
        lambda: _all_resolved(errors), "the budget failures to be resolved by the recovery"
    )
    assert {e["error_type"] for e in resolved} == {"parse"}


async def _all_resolved(errors: Any) -> list[dict[str, Any]] | None:
    rows: list[dict[str, Any]] = await errors()
    return rows if rows and all(e["resolved"] for e in rows) else None
