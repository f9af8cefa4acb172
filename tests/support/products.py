"""Products saved the way the pipeline saves them, for API tests."""

from __future__ import annotations

from typing import Any

import httpx

from forager.api.deps import Runtime
from forager.db.models import CrawlTask
from forager.parse.base import ProductRecord
from forager.products.persist import save_product
from forager.queue.door import SubmitSpec, submit_urls


def runtime_of(api: httpx.AsyncClient) -> Runtime:
    runtime: Runtime = api.app.state.runtime  # type: ignore[attr-defined]
    return runtime


async def save(api: httpx.AsyncClient, url: str, **fields: Any) -> int:
    """Submit ``url`` (a known URL: its task) and save ``fields`` as its product; its id."""
    runtime = runtime_of(api)
    [outcome] = await submit_urls(runtime.db, runtime.settings, [SubmitSpec(url=url)])
    assert outcome.task_id is not None
    async with runtime.db.session() as session:
        task = await session.get_one(CrawlTask, outcome.task_id)
        record = ProductRecord(url=task.url, parser_name="generic", parser_version="1", **fields)
        product_id, _ = await save_product(
            session,
            domain_id=task.domain_id,
            task_id=task.id,
            url=task.url,
            url_hash=task.url_hash,
            record=record,
        )
    return product_id
