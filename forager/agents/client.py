"""The agent program (``forager agent run``): dials out to the server, fetches what it is given.

It needs only the package: no database, no server settings. It connects outbound (works
behind NAT), reconnects with exponential backoff after any network loss, never logs its
token, and on SIGTERM stops taking tasks, finishes (or returns) what it holds and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import random
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from forager import __version__
from forager.agents import protocol
from forager.config import Settings
from forager.errors import FetchError, ForagerError, HTTPStatusError
from forager.fetch.base import FetchRequest, FetchResponse
from forager.fetch.egress import PRIVATE_TARGETS
from forager.fetch.fetcher_set import FETCHER_KINDS, FetcherSet
from forager.fetch.http import HttpFetcher

log = logging.getLogger("forager.agent")

BACKOFF_START = 1.0
BACKOFF_MAX = 30.0
DEFAULT_CHROMIUM = Path("/usr/bin/chromium")


def available_fetchers(chromium_path: Path = DEFAULT_CHROMIUM) -> list[str]:
    """What this machine can fetch with: ``http`` and ``impersonate`` always (both are
    libcurl, in the package), ``browser`` when Chromium is installed at ``chromium_path``."""
    kinds = ["http", "impersonate"]
    if chromium_path.is_file() and os.access(chromium_path, os.X_OK):
        kinds.append("browser")
    return kinds


class AgentRefused(ForagerError):
    """The server closed the connection for a reason reconnecting cannot fix."""


class AgentClient:
    """One agent: a connection loop with backoff around a session that runs fetch jobs."""

    def __init__(
        self,
        server: str,
        token: str,
        *,
        concurrency: int = 1,
        allow_domains: list[str] | None = None,
        isp: str | None = None,
        ip_echo_url: str | None = None,
        shutdown_seconds: float = 30.0,
        backoff_max: float = BACKOFF_MAX,
        private_targets: str = "submitted",
        fetchers: list[str] | None = None,
        chromium_path: Path = DEFAULT_CHROMIUM,
    ) -> None:
        self.url = protocol.ws_url(server)
        self._token = token
        self.concurrency = concurrency
        self.allow = {d.strip().lower() for d in allow_domains or [] if d.strip()} or None
        self.isp = isp
        self.ip_echo_url = ip_echo_url
        self.shutdown_seconds = shutdown_seconds
        self.backoff_max = backoff_max
        if private_targets not in PRIVATE_TARGETS:
            raise ValueError(f"private targets must be one of {', '.join(PRIVATE_TARGETS)}")
        # The egress policy on the agent's own network: its owner's choice, never the server's.
        self.private_targets = private_targets
        # The fetchers advertised in the hello: the server sends only tasks of domains
        # fetched with one of them (docs/AGENTS.md "Routing").
        self.chromium_path = chromium_path
        self.fetchers = list(fetchers) if fetchers else available_fetchers(chromium_path)
        unknown = sorted(set(self.fetchers) - set(FETCHER_KINDS))
        if unknown:
            raise ValueError(f"unknown fetcher {unknown[0]!r} (known: {', '.join(FETCHER_KINDS)})")
        self.completed = 0
        self._stopping = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._jobs: dict[int, asyncio.Task[None]] = {}
        self._unacked: set[int] = set()  # results sent that the server has not recorded yet
        self._all_acked = asyncio.Event()
        self._welcomed = False

    def stop(self) -> None:
        """Finish or return the tasks in hand, then exit (SIGTERM, SIGINT)."""
        if not self._stopping.is_set():
            log.info("stopping: finishing the tasks in hand (up to %.0f s)", self.shutdown_seconds)
        self._stopping.set()

    async def run(self) -> int:
        """Connect, work, reconnect on loss; returns the exit code (0 after ``stop``)."""
        delay = BACKOFF_START
        while not self._stopping.is_set():
            self._welcomed = False
            try:
                async with connect(
                    self.url,
                    max_size=protocol.MAX_MESSAGE_BYTES,
                    open_timeout=10,
                    # Pings find a server that vanished without closing (NAT, power loss).
                    ping_interval=20,
                    ping_timeout=60,
                    user_agent_header=f"forager-agent/{__version__}",
                ) as ws:
                    await self._session(ws)
            except AgentRefused as exc:
                log.error("%s; not reconnecting", exc)
                return 2
            except InvalidURI as exc:
                log.error("bad server URL: %s", exc)
                return 2
            except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
                log.warning("connection to %s lost or refused: %s", self.url, _describe(exc))
            if self._stopping.is_set():
                break
            # After a working session start again from the shortest wait.
            delay = BACKOFF_START if self._welcomed else min(self.backoff_max, delay * 2)
            wait = delay * random.uniform(0.5, 1.0)
            log.info("reconnecting in %.1f s", wait)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait)
        log.info("agent stopped after %d tasks", self.completed)
        return 0

    # -- one connection ---------------------------------------------------------------------

    async def _session(self, ws: ClientConnection) -> None:
        """Run one connection until it closes (or ``stop`` drains it)."""
        self._unacked.clear()  # a lost connection's acks never come
        await self._send(
            ws,
            protocol.message(
                "hello",
                token=self._token,
                agent_version=__version__,
                capabilities={
                    "concurrency": self.concurrency,
                    "fetchers": self.fetchers,
                    "compression": ["gzip"],
                    "allow_domains": sorted(self.allow) if self.allow else None,
                },
            ),
        )
        try:
            welcome = json.loads(await asyncio.wait_for(ws.recv(), protocol.HELLO_SECONDS + 5))
        except ConnectionClosed as exc:
            _raise_if_fatal(exc)
            raise
        if welcome.get("type") != "welcome":
            raise AgentRefused(f"unexpected first message from the server: {welcome.get('type')}")
        self._welcomed = True
        log.info(
            "connected to %s as agent %r (status %s)",
            self.url,
            welcome.get("name"),
            welcome.get("status"),
        )
        # One fetcher of each kind the task asks for, built on first use (Chromium starts
        # only when a browser task comes).
        fetcher = FetcherSet(
            self._settings(
                max_body_bytes=int(welcome["max_body_bytes"]),
                fetch_timeout_seconds=float(welcome["fetch_timeout_seconds"]),
                connect_timeout_seconds=float(welcome["connect_timeout_seconds"]),
                max_redirects=int(welcome["max_redirects"]),
                chromium_path=self.chromium_path,
            )
        )
        side = [
            asyncio.create_task(self._heartbeats(ws, float(welcome["heartbeat_seconds"]))),
        ]
        reader = asyncio.create_task(self._read(ws, fetcher))
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({reader, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not reader.done():
                await self._drain(ws, reader)
            await reader
        except ConnectionClosed as exc:
            _raise_if_fatal(exc)
            raise
        finally:
            for task in [*side, reader, stopping, *self._jobs.values()]:
                task.cancel()
            await asyncio.gather(
                *side, reader, stopping, *self._jobs.values(), return_exceptions=True
            )
            self._jobs.clear()
            await fetcher.aclose()

    async def _drain(self, ws: ClientConnection, reader: asyncio.Task[None]) -> None:
        """Say goodbye, let jobs finish for ``shutdown_seconds``, return the rest, wait (in the
        same budget, while the connection lasts) until the server has recorded the results
        sent, close."""
        deadline = asyncio.get_running_loop().time() + self.shutdown_seconds
        await self._send(ws, protocol.message("goodbye"))
        if self._jobs:
            _, late = await asyncio.wait(list(self._jobs.values()), timeout=self.shutdown_seconds)
            for job in late:
                job.cancel()
            for task_id in [t for t, job in self._jobs.items() if job in late]:
                await self._send(ws, protocol.message("return", task_id=task_id, reason="stopping"))
        if self._unacked and not reader.done():  # exiting now could beat the server's write
            self._all_acked.clear()
            acked = asyncio.create_task(self._all_acked.wait())
            left = max(0.0, deadline - asyncio.get_running_loop().time())
            # A connection that closes meanwhile (the reader ends) will bring no more acks.
            await asyncio.wait({acked, reader}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            acked.cancel()
        await ws.close(protocol.CLOSE_NORMAL, "agent stopping")

    async def _read(self, ws: ClientConnection, fetcher: FetcherSet) -> None:
        async for raw in ws:
            if isinstance(raw, bytes):
                continue  # the server sends no binary frames
            msg = json.loads(raw)
            kind = msg.get("type")
            if kind == "task":
                self._on_task(ws, fetcher, msg)
            elif kind == "ack":
                self.completed += msg.get("outcome") == "completed"
                self._unacked.discard(msg.get("task_id"))
                if not self._unacked:
                    self._all_acked.set()
                log.info("task %s: %s", msg.get("task_id"), msg.get("outcome"))
            elif kind == "status":
                log.warning("server set this agent %s %s", msg.get("status"), msg.get("reason", ""))
            elif kind == "error":
                log.warning("server says: %s", msg.get("message"))

    def _on_task(self, ws: ClientConnection, fetcher: FetcherSet, msg: dict[str, Any]) -> None:
        task_id = int(msg["task_id"])
        host = (urlsplit(msg["url"]).hostname or "").lower()
        kind = msg.get("fetcher", "http")  # older servers send none: plain HTTP
        reason = None
        if self._stopping.is_set():
            reason = "stopping"
        elif self.allow is not None and host not in self.allow:
            reason = f"{host} is not on the allow-list"
        elif kind not in self.fetchers:
            reason = f"this agent does not fetch with {str(kind)[:20]!r}"
        if reason is not None:
            log.info("task %s: returned (%s)", task_id, reason)
            job = self._send(ws, protocol.message("return", task_id=task_id, reason=reason))
            asyncio.create_task(job)  # noqa: RUF006 - short, and the connection outlives it
            return
        log.info("task %s: fetching %s", task_id, msg["url"])
        self._jobs[task_id] = asyncio.create_task(self._job(ws, fetcher, task_id, msg))

    async def _job(
        self, ws: ClientConnection, fetcher: FetcherSet, task_id: int, msg: dict[str, Any]
    ) -> None:
        try:

            async def sent() -> None:
                await self._send(ws, protocol.message("sent", task_id=task_id))

            request = FetchRequest(
                msg["url"],
                msg["user_agent"],
                headers=_strings(msg.get("headers")),
                cookies=_strings(msg.get("cookies")),
                method="POST" if msg.get("method") == "POST" else "GET",
                body=msg["body"].encode() if isinstance(msg.get("body"), str) else None,
                body_type=msg.get("body_type") if isinstance(msg.get("body_type"), str) else None,
                on_sent=sent,
                fetcher=msg.get("fetcher", "http"),
                wait_for_selector=_text(msg.get("wait_for_selector")),
            )
            warmed: dict[str, str] = {}
            try:
                warmup = msg.get("warmup_url")
                if isinstance(warmup, str) and warmup:  # a new sticky session's first fetch
                    first = replace(request, url=warmup, method="GET", body=None, on_sent=None)
                    warmed = (await fetcher.fetch(first)).cookies
                    request = replace(request, cookies=request.cookies | warmed)
                response = await fetcher.fetch(request)
            except FetchError as exc:
                log.info("task %s: fetch failed (%s)", task_id, exc.error_type)
                self._unacked.add(task_id)
                await self._failed(ws, task_id, exc)
                return
            self._unacked.add(task_id)
            await self._stream(ws, task_id, response, warmed | response.cookies)
        finally:
            self._jobs.pop(task_id, None)

    async def _stream(
        self,
        ws: ClientConnection,
        task_id: int,
        response: FetchResponse,
        cookies: dict[str, str],
    ) -> None:
        await self._send(
            ws,
            protocol.message(
                "result",
                task_id=task_id,
                ok=True,
                status_code=response.status_code,
                final_url=response.url,
                headers=_headers(response.headers),
                elapsed_ms=response.elapsed_ms,
                body_bytes=len(response.body),
                encoding="gzip",
                # Kept in the task's sticky session, if it has one; never logged here.
                cookies=_bounded(cookies),
            ),
        )
        await self._send_gzip(ws, task_id, response.body)

    async def _failed(self, ws: ClientConnection, task_id: int, exc: FetchError) -> None:
        """An HTTP error answer goes with its headers and the start of its body: the server
        tells a block page (this agent is blocked) from a plain 404/500 by them."""
        headers: dict[str, str] = {}
        body = b""
        if isinstance(exc, HTTPStatusError):
            headers, body = _headers(exc.headers), exc.body[: protocol.ERROR_BODY_BYTES]
        await self._send(
            ws,
            protocol.message(
                "result",
                task_id=task_id,
                ok=False,
                error_type=exc.error_type,
                message=exc.message[:2000],
                status_code=exc.status_code,
                headers=headers,
                body_bytes=len(body),
                encoding="gzip",
            ),
        )
        if body:
            await self._send_gzip(ws, task_id, body)

    async def _send_gzip(self, ws: ClientConnection, task_id: int, body: bytes) -> None:
        """``body`` as one gzip stream in binary frames, then ``body_end``."""
        gzip = zlib.compressobj(6, zlib.DEFLATED, 31)
        step = protocol.CHUNK_BYTES
        for start in range(0, len(body), step):
            await self._send_body(ws, task_id, gzip.compress(body[start : start + step]))
        await self._send_body(ws, task_id, gzip.flush())
        await self._send(ws, protocol.message("body_end", task_id=task_id))

    async def _send_body(self, ws: ClientConnection, task_id: int, data: bytes) -> None:
        step = protocol.CHUNK_BYTES
        for start in range(0, len(data), step):
            await self._send(ws, protocol.frame(task_id, data[start : start + step]))

    async def _heartbeats(self, ws: ClientConnection, every: float) -> None:
        while True:
            ip = await self._external_ip()
            await self._send(ws, protocol.message("heartbeat", external_ip=ip, isp=self.isp))
            await asyncio.sleep(every)

    def _settings(self, **values: Any) -> Settings:
        """The fetch settings of this agent: the server's limits, the agent's egress policy."""
        return Settings.model_construct(private_targets=self.private_targets, **values)

    async def _external_ip(self) -> str | None:
        if not self.ip_echo_url:
            return None  # the server records the address it sees
        fetcher = HttpFetcher(
            self._settings(
                max_body_bytes=1024,
                fetch_timeout_seconds=5.0,
                connect_timeout_seconds=5.0,
                max_redirects=2,
            )
        )
        try:
            request = FetchRequest(self.ip_echo_url, f"forager-agent/{__version__}")
            response = await fetcher.fetch(request)
            return str(ipaddress.ip_address(response.text.strip()))
        except (FetchError, ValueError) as exc:
            log.debug("external IP lookup failed: %s", exc)
            return None
        finally:
            await fetcher.aclose()

    async def _send(self, ws: ClientConnection, data: dict[str, Any] | bytes) -> None:
        payload = data if isinstance(data, bytes) else json.dumps(data)
        async with self._send_lock:
            await ws.send(payload)


def _headers(headers: dict[str, str]) -> dict[str, str]:
    """The response headers worth sending (bounded, as the server refuses huge ones)."""
    return {k[:200]: v[:8192] for k, v in list(headers.items())[:200]}


def _raise_if_fatal(exc: ConnectionClosed) -> None:
    rcvd = exc.rcvd
    if rcvd is not None and rcvd.code in protocol.FATAL_CLOSE_CODES:
        if rcvd.code == protocol.CLOSE_UNAUTHORIZED:
            raise AgentRefused(
                "the server refused this agent's token (unknown, revoked or rotated)"
            ) from exc
        raise AgentRefused(f"the server closed the connection: {rcvd.reason or rcvd.code}") from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionClosed) and exc.rcvd is not None:
        return f"closed by the server ({exc.rcvd.code} {exc.rcvd.reason})".replace(" )", ")")
    return str(exc) or type(exc).__name__


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _bounded(cookies: dict[str, str]) -> dict[str, str]:
    """The cookies a result may carry (the protocol's bounds: longer ones are left out)."""
    fit = [(k, v) for k, v in cookies.items() if len(k) <= 200 and len(v) <= 4096]
    return dict(fit[: protocol.MAX_COOKIES])


def _strings(value: Any) -> dict[str, str]:
    """A task message's ``headers`` or ``cookies`` (absent from older servers: none)."""
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}
