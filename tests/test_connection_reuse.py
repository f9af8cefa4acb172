"""The libcurl fetchers reuse the connections of every host a crawl visits in turn.

A burst of requests to each of six hosts, then the same again: the second round opens no
connection. (What made the fetchers keep more idle connections than libcurl's default — a
3,000-page crawl over ten nginx hosts opened ~2,500 connections, most used once — shows only
under a whole crawl's flow; this test guards reuse across hosts, which any change to the
connection options could break.) The server here counts the connections it accepts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from forager.fetch.base import FetchRequest
from forager.fetch.fetcher_set import build_fetcher
from tests.support.fetching import fetch_settings

UA = "Forager-test/1.0"
HOSTS = tuple(f"127.0.0.{n}" for n in range(1, 7))
BURST = 4  # requests at once to one host
BODY = b"<html><body><h1>ok</h1></body></html>"


class CountingServer:
    """HTTP/1.1 with keep-alive on each of ``HOSTS``; ``accepted`` counts connections."""

    def __init__(self) -> None:
        self.accepted = 0
        self.port = 0
        self._servers: list[asyncio.Server] = []
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for host in HOSTS:
            server = await asyncio.start_server(self._serve, host, self.port)
            self.port = server.sockets[0].getsockname()[1]
            self._servers.append(server)

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
            await server.wait_closed()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    def url(self, host: str, n: int) -> str:
        return f"http://{host}:{self.port}/p/{n}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n"
                writer.write(head % len(BODY) + BODY)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def server() -> AsyncIterator[CountingServer]:
    counting = CountingServer()
    await counting.start()
    yield counting
    await counting.stop()


@pytest.mark.parametrize("kind", ["http", "impersonate"])
async def test_idle_connections_of_every_host_are_kept(
    kind: str, server: CountingServer, tmp_path: Path
) -> None:
    fetcher = build_fetcher(kind, fetch_settings(tmp_path))

    async def burst(host: str) -> None:
        pages = await asyncio.gather(
            *(fetcher.fetch(FetchRequest(server.url(host, n), UA)) for n in range(BURST))
        )
        assert [p.status_code for p in pages] == [200] * BURST

    try:
        for host in HOSTS:  # a burst to each host in turn: up to four connections each
            await burst(host)
        opened = server.accepted
        assert opened > 2 * BURST
        for host in HOSTS:  # the same again: every connection is still there
            await burst(host)
    finally:
        await fetcher.aclose()
    assert server.accepted == opened
