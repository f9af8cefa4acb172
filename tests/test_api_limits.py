"""The edge guard refuses a NUL wherever it falls in the body, even split across chunks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest


def _chunks(body: bytes, cut: int) -> AsyncIterator[bytes]:
    async def gen() -> AsyncIterator[bytes]:
        yield body[:cut]
        yield body[cut:]

    return gen()


@pytest.mark.parametrize("cut", [0, 1, 3, 5, 6])
async def test_nul_escape_split_across_chunks_is_refused(api: httpx.AsyncClient, cut: int) -> None:
    body = json.dumps({"url": "https://shop.example/p/1\u0000x"}).encode()
    start = body.index(b"\\u0000")
    response = await api.post(
        "/api/tasks",
        content=_chunks(body, start + cut),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert "NUL" in response.json()["detail"]
    listed = (await api.get("/api/tasks")).json()
    assert listed["total"] == 0  # nothing was created


async def test_a_clean_chunked_body_passes(api: httpx.AsyncClient) -> None:
    body = json.dumps({"url": "https://shop.example/p/u0000"}).encode()
    response = await api.post(
        "/api/tasks", content=_chunks(body, 10), headers={"content-type": "application/json"}
    )
    assert response.status_code == 201, response.text
