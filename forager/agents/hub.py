"""The agent hub: holds agents' WebSocket connections, pushes them tasks, takes back pages.

Its parts: ``connection`` (one connection's state, the hello), ``dispatch`` (each connection's
claim loop, the worker pool's own, and the hand-out), ``liveness`` (heartbeat timeouts, revoked
tokens); the hub routes an agent's messages and settles its results.

Agents fetch, the server parses (DESIGN.md decision 4). A task is claimed through the
queue like any worker's, with the connection as lease owner (``agent:<id>:<nonce>``), so
priority, politeness gates and per-domain in-flight limits hold across agents and
workers alike. The page an agent returns goes through the worker pipeline's store and
parse steps; every move is a compare-and-set on that lease, so a result for a task that
was reassigned or cancelled meanwhile is discarded without touching anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from typing import Any

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import select
from starlette.websockets import WebSocket

from forager.agents import admin, presence, protocol
from forager.agents.admin import A
from forager.agents.body import BodyReceiver, failure, wants_body
from forager.agents.connection import (
    RETURN_WINDOW_SECONDS,
    Assigned,
    Connection,
    close,
    read_hello,
    validation_reason,
)
from forager.agents.dispatch import Dispatcher
from forager.agents.liveness import Liveness
from forager.agents.protocol import AgentMessage
from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlTask
from forager.errors import FetchError, TooLarge, effect
from forager.fetch.base import FetchResponse
from forager.politeness.gate import open_after
from forager.queue.door import TaskQueue
from forager.queue.lifecycle import TaskStatus
from forager.store.pages import PageStore
from forager.worker.parts import Parts
from forager.worker.pipeline import Pipeline

log = logging.getLogger(__name__)
S = TaskStatus
_MESSAGES: TypeAdapter[Any] = TypeAdapter(AgentMessage)
# Messages about task ids a connection never held (or long forgot) before it is closed.
_UNKNOWN_LIMIT = 100


class AgentHub:
    """Every agent connection of this server process, the dispatcher and the liveness sweeper."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        pages: PageStore | None = None,
        parts: Parts | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.queue = TaskQueue(db, settings)
        self._owns_parts = parts is None
        self.parts = parts or Parts.build(db, settings)
        self.pages = pages or self.parts.pages
        self.parts.wake.listen(self.wake)
        self.connections: dict[int, Connection] = {}
        self.dispatch = Dispatcher(db, settings, self.queue, self.parts.box)
        self.liveness = Liveness(db, settings, self.connections, self._drop, self._settle)
        self._settling: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None
        self._stop_sweeping = asyncio.Event()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._runner = asyncio.create_task(self.liveness.run(self._stop_sweeping), name="agent hub")

    async def stop(self) -> None:
        """Close every connection (agents reconnect with backoff) and give their tasks back."""
        if self._runner is not None:  # ends between sweeps, never inside one's transaction
            self._stop_sweeping.set()
            await asyncio.gather(self._runner, return_exceptions=True)
        conns = list(self.connections.values())
        for conn in conns:
            await self._drop(conn, "server shutting down", protocol.CLOSE_RESTART)
        await asyncio.gather(*(c.feeder for c in conns if c.feeder), return_exceptions=True)
        if self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)
        if self._owns_parts:
            await self.parts.aclose()

    def wake(self) -> None:
        """Work may be claimable (a result came in, a task was given back, an agent reset)."""
        self.dispatch.something_new()
        for conn in self.connections.values():
            conn.wake()

    @property
    def task_deadline_seconds(self) -> float:
        """How long an agent may hold one task without finishing it (``Liveness``)."""
        return self.liveness.task_deadline_seconds

    # -- operator actions (from the API in this process) ---------------------------------------

    async def kick(self, agent_id: int, reason: str) -> None:
        """Close the agent's live connection here, if any (revoked, token rotated)."""
        conn = self.connections.get(agent_id)
        if conn is not None:
            await self._drop(conn, reason, protocol.CLOSE_UNAUTHORIZED)

    async def status_changed(self, agent_id: int, status: str) -> None:
        """The operator changed the agent's status (manual reset): act on it at once."""
        conn = self.connections.get(agent_id)
        if conn is not None:
            conn.status = status
            await conn.send("status", status=status)
            self.wake()

    # -- one connection ---------------------------------------------------------------------

    async def serve(self, ws: WebSocket) -> None:
        """Handle one agent connection from hello to close."""
        await ws.accept()
        conn = await self._handshake(ws)
        if conn is None:
            return
        reason, code = "connection closed by the agent", protocol.CLOSE_NORMAL
        try:
            reason, code = await self._read_loop(conn)
        except Exception:
            if not conn.dropped:  # after a drop (timeout, revoke) the socket may just fail
                log.exception("agent %s: connection failed", conn.name)
            reason = "server error on the connection"
        finally:
            await self._drop(conn, reason, code)

    async def _handshake(self, ws: WebSocket) -> Connection | None:
        met = await read_hello(ws)
        if met is None:
            return None
        hello, token = met
        agent = await admin.authenticate(self.db, token) if token else None
        if agent is None:
            await close(ws, protocol.CLOSE_UNAUTHORIZED, "authentication failed")
            return None
        old = self.connections.get(agent.id)
        if old is not None:
            await self._drop(old, "replaced by a newer connection", protocol.CLOSE_REPLACED)
        owner = f"agent:{agent.id}:{secrets.token_hex(4)}"
        conn = Connection(
            ws=ws,
            agent_id=agent.id,
            name=agent.name,
            token_hash=agent.token_hash,
            owner=owner,
            capacity=hello.capabilities.concurrency,
            domains=hello.capabilities.allow_domains,
            fetchers=hello.capabilities.fetchers,
            pipeline=Pipeline(
                self.db,
                self.queue,
                None,  # the agent fetches; the pipeline stores, parses and finishes
                self.pages,
                self.parts.box,
                owner,
                parser=self.parts.parser,
                writer=self.parts.writer,
                robots_fetcher=self.parts.fetchers,  # robots.txt is fetched by this server
            ),
        )
        peer = ws.client.host if ws.client else None
        conn.status = await presence.connected(
            self.db, agent.id, version=hello.agent_version, ip=peer
        )
        self.connections[agent.id] = conn
        self.dispatch.start(conn)
        log.info(
            "agent %s connected from %s (version %s, concurrency %d)",
            agent.name,
            peer,
            hello.agent_version,
            conn.capacity,
        )
        await conn.send(
            "welcome",
            agent_id=agent.id,
            name=agent.name,
            status=conn.status,
            heartbeat_seconds=self.settings.agent_heartbeat_interval,
            max_body_bytes=self.settings.max_body_bytes,
            chunk_bytes=protocol.CHUNK_BYTES,
            fetch_timeout_seconds=self.settings.fetch_timeout_seconds,
            connect_timeout_seconds=self.settings.connect_timeout_seconds,
            max_redirects=self.settings.max_redirects,
        )
        self.wake()
        return conn

    async def _read_loop(self, conn: Connection) -> tuple[str, int]:
        while True:
            msg = await conn.ws.receive()
            conn.last_heartbeat = time.monotonic()  # any message shows the agent is alive
            if msg["type"] == "websocket.disconnect":
                return "connection closed", int(msg.get("code") or protocol.CLOSE_NORMAL)
            if msg.get("bytes") is not None:
                await self._on_chunk(conn, msg["bytes"])
                continue
            try:
                parsed = _MESSAGES.validate_python(json.loads(msg.get("text") or ""))
            except (ValueError, ValidationError) as exc:
                detail = validation_reason(exc) if isinstance(exc, ValidationError) else "not JSON"
                await conn.send("error", message=f"message refused: {detail}")
                continue
            if parsed.v != protocol.VERSION:
                await conn.send("error", message=f"message version must be {protocol.VERSION}")
                continue
            await self._on_message(conn, parsed)

    async def _on_message(self, conn: Connection, msg: Any) -> None:
        if isinstance(msg, protocol.Heartbeat):
            await self._on_heartbeat(conn, msg)
        elif isinstance(msg, protocol.Sent):
            assigned = conn.in_flight.get(msg.task_id)
            if assigned is not None and not assigned.gate_opened:
                assigned.gate_opened = True
                async with self.db.session() as session:
                    task = assigned.task
                    await open_after(session, task.domain_id, task.crawl_delay_seconds)
        elif isinstance(msg, protocol.Result):
            await self._on_result(conn, msg)
        elif isinstance(msg, protocol.BodyEnd):
            await self._on_body_end(conn, msg.task_id)
        elif isinstance(msg, protocol.Return):
            assigned = conn.in_flight.get(msg.task_id)
            if assigned is None:
                await self._unknown(conn, msg.task_id)
            elif not assigned.settling:
                # Counted before the slot frees: the feed loop must not hand the agent another
                # task while the release below awaits the database (the cut-off would come late).
                cut_off = conn.returned()
                conn.in_flight.pop(msg.task_id)
                await self.queue.release(msg.task_id, conn.owner)
                await self.dispatch.sessions.release(assigned.sticky)  # unfetched: unchanged
                if cut_off:
                    log.warning(
                        "agent %s returned %d tasks within %.0f s: no new tasks for %.0f s",
                        conn.name,
                        len(conn.returns),
                        RETURN_WINDOW_SECONDS,
                        RETURN_WINDOW_SECONDS,
                    )
                await self._after_task(conn, completed=0, failed=0)
                log.info("agent %s returned task %s (%s)", conn.name, msg.task_id, msg.reason)
        elif isinstance(msg, protocol.Goodbye):
            conn.draining = True
            log.info("agent %s is shutting down", conn.name)
        else:  # a second hello
            await conn.send("error", message="already authenticated")

    async def _on_heartbeat(self, conn: Connection, msg: protocol.Heartbeat) -> None:
        conn.last_heartbeat = time.monotonic()
        before = conn.status
        status = await presence.heartbeat(self.db, conn.agent_id, ip=msg.external_ip, isp=msg.isp)
        if status is None:
            await self._drop(conn, "authentication failed", protocol.CLOSE_UNAUTHORIZED)
            return
        if conn.in_flight:
            await self.queue.heartbeat(conn.owner)
        # A status read before this connection blocked itself meanwhile is stale, not a reset.
        changed_here = conn.status != before
        if status != conn.status and A.BLOCKED in (status, conn.status) and not changed_here:
            # Reset (or blocked) by an operator through another process.
            conn.status = status
            self.wake()
        await conn.send("heartbeat_ack", status=conn.status)

    # -- results ----------------------------------------------------------------------------

    async def _on_result(self, conn: Connection, msg: protocol.Result) -> None:
        assigned = conn.in_flight.get(msg.task_id)
        if assigned is None or assigned.settling or assigned.body is not None:
            # Timed out, settled, or never this connection's: nothing may change.
            if assigned is None and msg.task_id not in conn.ignored:
                await self._unknown(conn, msg.task_id)
            conn.ignore(msg.task_id)
            await conn.send("ack", task_id=msg.task_id, outcome="discarded")
            return
        if not msg.ok:
            if wants_body(msg):  # the start of an error page follows: it may be a block page
                assigned.body = BodyReceiver(msg, protocol.ERROR_BODY_BYTES, assigned.task.url)
            else:
                self._settle(conn, assigned, failure(msg))
            return
        limit = self.settings.max_body_bytes
        if msg.body_bytes > limit:
            conn.ignore(msg.task_id)
            self._settle(
                conn, assigned, TooLarge(f"body of {msg.body_bytes} bytes exceeds {limit}")
            )
            return
        assigned.body = BodyReceiver(msg, limit, assigned.task.url)

    async def _on_chunk(self, conn: Connection, data: bytes) -> None:
        try:
            task_id, chunk = protocol.unframe(data)
        except ValueError:
            await conn.send("error", message="a binary frame starts with an 8-byte task id")
            return
        if task_id in conn.ignored:
            return
        assigned = conn.in_flight.get(task_id)
        if assigned is None or assigned.body is None or assigned.settling:
            if assigned is None:
                await self._unknown(conn, task_id)
            conn.ignore(task_id)
            return
        try:
            assigned.body.feed(chunk)
        except FetchError as exc:  # too large once decompressed, or corrupt
            conn.ignore(task_id)
            header, assigned.body = assigned.body.header, None
            # A broken error page loses its body, not its status.
            self._settle(conn, assigned, exc if header.ok else failure(header))

    async def _on_body_end(self, conn: Connection, task_id: int) -> None:
        if task_id in conn.ignored:
            del conn.ignored[task_id]
            return
        assigned = conn.in_flight.get(task_id)
        if assigned is None or assigned.body is None or assigned.settling:
            return
        body, assigned.body = assigned.body, None
        try:
            outcome = body.finish()
        except FetchError as exc:
            outcome = exc if body.header.ok else failure(body.header)
        self._settle(conn, assigned, outcome)

    async def _unknown(self, conn: Connection, task_id: int) -> None:
        """A message about a task this connection does not hold: tolerated a few times (a
        late frame), then the connection is closed."""
        conn.unknown += 1
        if conn.unknown > _UNKNOWN_LIMIT:
            log.warning("agent %s: too many messages about tasks it does not hold", conn.name)
            await self._drop(
                conn, "too many messages about tasks it does not hold", protocol.CLOSE_PROTOCOL
            )

    def _settle(
        self, conn: Connection, assigned: Assigned, outcome: FetchResponse | FetchError
    ) -> None:
        """Store and parse in the background: the connection keeps reading meanwhile."""
        assigned.settling = True
        job = asyncio.create_task(self._settle_job(conn, assigned, outcome))
        self._settling.add(job)
        job.add_done_callback(self._settling.discard)

    async def _settle_job(
        self, conn: Connection, assigned: Assigned, outcome: FetchResponse | FetchError
    ) -> None:
        task = assigned.task
        try:
            status = await conn.pipeline.run_fetched(
                task,
                assigned.started,
                outcome,
                gate_opened=assigned.gate_opened,
                sticky=assigned.sticky,
            )
            block = await self._block_reason(task.id) if status in (S.PENDING, S.FAILED) else None
        except Exception:
            log.exception("task %s: storing the agent's result failed", task.id)
            status, block = None, None
        try:
            # Blocked before the slot frees: the feed loop must not hand it the retry.
            blocked = block is not None and await presence.blocked(self.db, conn.agent_id, block)
            if blocked:
                conn.status = A.BLOCKED
                log.warning("agent %s is blocked: %s", conn.name, block)
        finally:
            # The slot frees only now, with no await before the status below: the feeder must
            # not hand a banned agent more work (this very task's retry included) meanwhile.
            conn.in_flight.pop(task.id, None)
        await self._after_task(
            conn,
            completed=int(status == S.COMPLETED),
            failed=int(status in (S.PENDING, S.FAILED)),
        )
        outcome_name: dict[str | None, str] = {
            S.COMPLETED: "completed",
            S.PENDING: "retry",
            S.FAILED: "failed",
        }
        await conn.send("ack", task_id=task.id, outcome=outcome_name.get(status, "discarded"))
        if blocked:
            await conn.send("status", status=A.BLOCKED, reason=block)

    async def _after_task(self, conn: Connection, *, completed: int, failed: int) -> None:
        async with conn.status_lock:
            idle = not conn.in_flight and conn.status == A.BUSY
            try:
                await presence.finished(
                    self.db, conn.agent_id, completed=completed, failed=failed, idle=idle
                )
            except Exception:
                log.exception("agent %s: counting a result failed", conn.name)
            if idle:
                conn.status = A.CONNECTED
        self.wake()

    async def _block_reason(self, task_id: int) -> str | None:
        async with self.db.reader() as session:
            row = (
                await session.execute(
                    select(CrawlTask.error_type, CrawlTask.error_message).where(
                        CrawlTask.id == task_id
                    )
                )
            ).one_or_none()
        if row is None or not effect(row.error_type).blocks_agent:
            return None
        return f"{row.error_type}: {row.error_message or ''}"[:500]

    # -- leaving ----------------------------------------------------------------------------

    async def _drop(self, conn: Connection, reason: str, code: int) -> None:
        """Forget a connection: close it, give its unfinished tasks back, mark it disconnected."""
        if conn.dropped:
            return
        conn.dropped = True
        if conn.claiming is not None:
            conn.claiming.stop()  # its feed loop ends
        if self.connections.get(conn.agent_id) is conn:
            del self.connections[conn.agent_id]
        await close(conn.ws, code, reason)
        returned = []
        for task_id, assigned in list(conn.in_flight.items()):
            if assigned.settling:
                continue  # its result arrived: it is being stored and parsed
            conn.in_flight.pop(task_id, None)
            with contextlib.suppress(Exception):
                if await self.queue.release(task_id, conn.owner):
                    returned.append(task_id)
                await self.dispatch.sessions.release(assigned.sticky)
        if code != protocol.CLOSE_REPLACED:
            with contextlib.suppress(Exception):
                await presence.disconnected(self.db, conn.agent_id, reason, returned)
        log.info(
            "agent %s disconnected (%s); %d tasks back to the queue",
            conn.name,
            reason,
            len(returned),
        )
        self.wake()
