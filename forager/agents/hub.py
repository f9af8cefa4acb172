"""The agent hub: holds agents' WebSocket connections, pushes them tasks, takes back pages.

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
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import select
from starlette.websockets import WebSocket, WebSocketState

from forager.agents import presence, protocol, service
from forager.agents.body import BodyReceiver, failure, wants_body
from forager.agents.protocol import AgentMessage, Hello
from forager.agents.service import A
from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import CrawlTask
from forager.db.types import utcnow
from forager.errors import FetchError, FetchTimeout, TooLarge
from forager.fetch.base import FetchResponse
from forager.queue.lifecycle import TaskStatus
from forager.queue.store import ClaimedTask, TaskQueue
from forager.store.pages import PageStore
from forager.worker.parts import Parts
from forager.worker.pipeline import Pipeline

log = logging.getLogger(__name__)
S = TaskStatus
_MESSAGES: TypeAdapter[Any] = TypeAdapter(AgentMessage)
_BLOCK_TYPES = frozenset({"captcha", "blocked"})
# What one agent connection may cost the server, whatever it sends (issue 11):
# task ids whose late frames are dropped, remembered up to this many per connection;
_IGNORED_MAX = 256
# messages about task ids this connection never held (or long forgot) before it is closed;
_UNKNOWN_LIMIT = 100
# returned tasks allowed per window beyond its concurrency before it gets no work for a window.
_RETURN_WINDOW_SECONDS = 60.0


@dataclass(eq=False)
class _Assigned:
    task: ClaimedTask
    started: Any
    gate_opened: bool = False
    body: BodyReceiver | None = None
    settling: bool = False


@dataclass(eq=False)
class Connection:
    """One live agent connection, as the hub sees it."""

    ws: WebSocket
    agent_id: int
    name: str
    token_hash: str
    owner: str
    capacity: int
    domains: list[str] | None
    fetchers: list[str]
    pipeline: Pipeline
    status: str = A.CONNECTED
    last_heartbeat: float = field(default_factory=time.monotonic)
    in_flight: dict[int, _Assigned] = field(default_factory=dict)
    # Task ids whose remaining body frames are to be dropped (refused or timed-out results),
    # at most _IGNORED_MAX: the oldest is forgotten first.
    ignored: dict[int, None] = field(default_factory=dict)
    unknown: int = 0  # messages about tasks this connection does not hold
    returns: list[float] = field(default_factory=list)  # when it returned tasks, this window
    quiet_until: float = 0.0  # returned too many: no new tasks until then
    draining: bool = False
    dropped: bool = False
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    feeder: asyncio.Task[None] | None = None
    # Serializes busy/connected flips with task hand-outs, so the stored status stays true.
    status_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def free(self) -> int:
        if self.dropped or self.draining or self.status == A.BLOCKED:
            return 0
        if time.monotonic() < self.quiet_until:
            return 0
        return self.capacity - len(self.in_flight)

    def ignore(self, task_id: int) -> None:
        """Drop the rest of this task's frames (bounded: the oldest id is forgotten)."""
        self.ignored.pop(task_id, None)
        self.ignored[task_id] = None
        if len(self.ignored) > _IGNORED_MAX:
            del self.ignored[next(iter(self.ignored))]

    def returned(self) -> bool:
        """Count a returned task; True when this window's returns exceed its concurrency
        (a claim-and-return loop): it then gets no work for a window."""
        now = time.monotonic()
        self.returns = [t for t in self.returns if now - t < _RETURN_WINDOW_SECONDS]
        self.returns.append(now)
        if len(self.returns) <= self.capacity:
            return False
        self.quiet_until = now + _RETURN_WINDOW_SECONDS
        return True

    async def send(self, kind: str, **fields: Any) -> None:
        if self.dropped:
            return
        async with self.send_lock:
            with contextlib.suppress(Exception):  # a broken connection is noticed by the reader
                await self.ws.send_text(json.dumps(protocol.message(kind, **fields)))


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
        # Until then, idle agents skip claiming: the last claim found nothing due.
        self._nothing_until = 0.0
        self._settling: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name="agent hub")

    async def stop(self) -> None:
        """Close every connection (agents reconnect with backoff) and give their tasks back."""
        if self._runner is not None:
            self._runner.cancel()
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
        self._nothing_until = 0.0
        for conn in self.connections.values():
            conn.wake.set()

    async def _run(self) -> None:
        await self._sweep_loop()

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
        try:
            async with asyncio.timeout(protocol.HELLO_SECONDS):
                raw = await ws.receive_text()
            data = json.loads(raw)
        except TimeoutError:
            await _close(ws, protocol.CLOSE_TIMEOUT, "no hello message in time")
            return None
        except Exception:
            await _close(ws, protocol.CLOSE_PROTOCOL, "the first message must be a JSON hello")
            return None
        if not isinstance(data, dict) or data.get("type") != "hello":
            await _close(ws, protocol.CLOSE_PROTOCOL, "the first message must be a JSON hello")
            return None
        if data.get("v") != protocol.VERSION:
            await _close(
                ws,
                protocol.CLOSE_PROTOCOL,
                f"unsupported protocol version {str(data.get('v'))[:10]!r}; "
                f"this server speaks {protocol.VERSION}",
            )
            return None
        try:
            hello = Hello.model_validate(data)
        except ValidationError as exc:
            await _close(ws, protocol.CLOSE_PROTOCOL, _reason(exc))
            return None
        token = hello.token or _bearer(ws.headers.get("authorization", ""))
        agent = await service.authenticate(self.db, token) if token else None
        if agent is None:
            await _close(ws, protocol.CLOSE_UNAUTHORIZED, "authentication failed")
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
        conn.feeder = asyncio.create_task(self._feed(conn), name=f"agent {agent.name} feed")
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
                detail = _reason(exc) if isinstance(exc, ValidationError) else "not JSON"
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
                    await self.queue.open_gate(session, assigned.task)
        elif isinstance(msg, protocol.Result):
            await self._on_result(conn, msg)
        elif isinstance(msg, protocol.BodyEnd):
            await self._on_body_end(conn, msg.task_id)
        elif isinstance(msg, protocol.Return):
            assigned = conn.in_flight.get(msg.task_id)
            if assigned is None:
                await self._unknown(conn, msg.task_id)
            elif not assigned.settling:
                conn.in_flight.pop(msg.task_id)
                await self.queue.release(msg.task_id, conn.owner)
                if conn.returned():
                    log.warning(
                        "agent %s returned %d tasks within %.0f s: no new tasks for %.0f s",
                        conn.name,
                        len(conn.returns),
                        _RETURN_WINDOW_SECONDS,
                        _RETURN_WINDOW_SECONDS,
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
        self, conn: Connection, assigned: _Assigned, outcome: FetchResponse | FetchError
    ) -> None:
        """Store and parse in the background: the connection keeps reading meanwhile."""
        assigned.settling = True
        job = asyncio.create_task(self._settle_job(conn, assigned, outcome))
        self._settling.add(job)
        job.add_done_callback(self._settling.discard)

    async def _settle_job(
        self, conn: Connection, assigned: _Assigned, outcome: FetchResponse | FetchError
    ) -> None:
        task = assigned.task
        try:
            status = await conn.pipeline.run_fetched(
                task, assigned.started, outcome, gate_opened=assigned.gate_opened
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
        if row is None or row.error_type not in _BLOCK_TYPES:
            return None
        return f"{row.error_type}: {row.error_message or ''}"[:500]

    # -- dispatching ------------------------------------------------------------------------

    async def _feed(self, conn: Connection) -> None:
        """Keep one connection supplied, like a worker's claim loop (one per agent, so a slow
        claim for one agent never holds up the others)."""
        while not conn.dropped:
            conn.wake.clear()
            free = conn.free()
            # An agent that can fetch more than plain HTTP may find work the others cannot.
            skip = time.monotonic() < self._nothing_until and set(conn.fetchers) <= {"http"}
            if free > 0 and not skip:
                try:
                    tasks = await self.queue.claim(
                        conn.owner, free, domains=conn.domains, fetchers=conn.fetchers
                    )
                except Exception:
                    log.exception("claiming for agent %s failed", conn.name)
                    tasks = []
                for task in tasks:
                    try:
                        await self._assign(conn, task)
                    except Exception:  # a database error: the lease expires and it is reaped
                        log.exception("task %s: handing it to agent %s failed", task.id, conn.name)
                if tasks:
                    continue
                if conn.domains is None and conn.fetchers == ["http"]:
                    # Nothing for an unrestricted agent: nothing for the others either, so
                    # they skip their claims until the next wake-up or poll.
                    self._nothing_until = time.monotonic() + self.settings.poll_seconds
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(conn.wake.wait(), self.settings.poll_seconds)

    async def _assign(self, conn: Connection, task: ClaimedTask) -> int:
        if conn.dropped:
            await self.queue.release(task.id, conn.owner)
            return 0
        try:
            if not await conn.pipeline.allowed_by_robots(task):
                return 0  # failed robots_denied, as before a local fetch
        except Exception:
            log.exception("task %s: robots.txt check failed; sending it anyway", task.id)
        async with conn.status_lock:
            async with self.db.session() as session:
                if not await self.queue.start_crawl(session, task, conn.owner):
                    return 0  # paused or cancelled since the claim
                if conn.status == A.CONNECTED:
                    await service.transition(
                        session,
                        conn.agent_id,
                        from_=[A.CONNECTED],
                        to=A.BUSY,
                        details={"task": task.id},
                    )
            conn.status = A.BUSY if conn.status == A.CONNECTED else conn.status
            conn.in_flight[task.id] = _Assigned(task, started=utcnow())
        if conn.dropped:  # the connection went away while the task was being handed out
            conn.in_flight.pop(task.id, None)
            await self.queue.release(task.id, conn.owner)
            return 0
        await conn.send(
            "task",
            task_id=task.id,
            url=task.url,
            user_agent=task.user_agent,
            domain=task.domain_name,
        )
        return 1

    # -- liveness -------------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        every = min(1.0, self.settings.agent_heartbeat_interval / 2)
        while True:
            await asyncio.sleep(every)
            try:
                await self._sweep()
            except Exception:
                log.exception("agent sweep failed; retrying in %.1f s", every)

    @property
    def task_deadline_seconds(self) -> float:
        """How long an agent may hold one task without finishing it, heartbeats or not: its
        fetch time twice over (the fetch, then the upload) plus a heartbeat timeout."""
        return 2 * self.settings.fetch_timeout_seconds + self.settings.agent_timeout_seconds

    async def _sweep(self) -> None:
        timeout = self.settings.agent_timeout_seconds
        now = time.monotonic()
        for conn in list(self.connections.values()):
            if now - conn.last_heartbeat > timeout:
                log.warning("agent %s: no heartbeat for %.0f s", conn.name, timeout)
                await self._drop(conn, "heartbeat timeout", protocol.CLOSE_TIMEOUT)
            else:
                self._expire_overdue(conn)
        tokens = {c.agent_id: c.token_hash for c in self.connections.values()}
        valid = await presence.still_valid(self.db, tokens)
        for agent_id in set(tokens) - valid:
            revoked = self.connections.get(agent_id)
            if revoked is not None:
                await self._drop(revoked, "authentication failed", protocol.CLOSE_UNAUTHORIZED)
        # Agents another (dead) server process held: their heartbeats stopped long ago.
        await presence.sweep_silent(self.db, timeout, set(self.connections))

    def _expire_overdue(self, conn: Connection) -> None:
        """Fail (as a timeout, retried like any) each task the agent has held past the
        deadline: heartbeats keep its leases alive, so without this a silent agent could hold
        domains' concurrency slots for good."""
        deadline = self.task_deadline_seconds
        now = utcnow()
        for assigned in list(conn.in_flight.values()):
            if assigned.settling or (now - assigned.started).total_seconds() <= deadline:
                continue
            conn.ignore(assigned.task.id)
            assigned.body = None
            # Hoarding costs the tasks a retry each: it gets no new work for a while.
            conn.quiet_until = time.monotonic() + _RETURN_WINDOW_SECONDS
            log.warning(
                "agent %s held task %s for over %.0f s: failed as a timeout",
                conn.name,
                assigned.task.id,
                deadline,
            )
            self._settle(
                conn,
                assigned,
                FetchTimeout(f"the agent did not return the page within {deadline:.0f} s"),
            )

    async def _drop(self, conn: Connection, reason: str, code: int) -> None:
        """Forget a connection: close it, give its unfinished tasks back, mark it disconnected."""
        if conn.dropped:
            return
        conn.dropped = True
        conn.wake.set()  # its feed loop ends
        if self.connections.get(conn.agent_id) is conn:
            del self.connections[conn.agent_id]
        await _close(conn.ws, code, reason)
        returned = []
        for task_id, assigned in list(conn.in_flight.items()):
            if assigned.settling:
                continue  # its result arrived: it is being stored and parsed
            conn.in_flight.pop(task_id, None)
            with contextlib.suppress(Exception):
                if await self.queue.release(task_id, conn.owner):
                    returned.append(task_id)
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


def _bearer(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def _reason(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "message"
    return f"{where}: {first['msg']}"[:120]


async def _close(ws: WebSocket, code: int, reason: str) -> None:
    if ws.client_state == WebSocketState.DISCONNECTED or ws.application_state == (
        WebSocketState.DISCONNECTED
    ):
        return
    with contextlib.suppress(Exception):
        await ws.close(code=code, reason=reason[:120])
