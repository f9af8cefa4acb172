"""Per-test PostgreSQL databases made and dropped off the tests' own time.

Cloning the template (``CREATE DATABASE … TEMPLATE``) and dropping a used database (which
forces a checkpoint) took about 0.3 s each per test on this machine's PostgreSQL 15, in the
test's set-up and teardown. A thread of the session does both instead: it keeps one clone
ready for the next test and drops the used ones while tests run. Each test still gets a
database no other test has touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable

import asyncpg


class Clones:
    """Fresh clones of ``template`` (``take``), the used ones dropped (``give_back``).

    ``connect`` opens an admin connection (to a database other than the template).
    """

    def __init__(
        self,
        template: str,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        ready: int = 1,
    ) -> None:
        self._template = template
        self._connect = connect
        self._ready_target = ready
        self._ready: deque[str] = deque()
        self._used: deque[str] = deque()
        self._wanted = 0  # tests waiting in take()
        self._closing = False
        self._error: BaseException | None = None  # the last clone's failure, for one take()
        self._dead: BaseException | None = None  # the thread's own failure (its connection)
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="pg-clones", daemon=True)
        self._thread.start()

    def take(self) -> str:
        """The name of a fresh clone of the template, this caller's alone."""
        with self._changed:
            self._wanted += 1
            self._changed.notify_all()
            try:
                while not self._ready:
                    if self._error is not None:  # this test fails; the next one tries again
                        error, self._error = self._error, None
                        raise RuntimeError("cloning the template failed") from error
                    if self._dead is not None:
                        raise RuntimeError("the cloning thread has stopped") from self._dead
                    self._changed.wait()
                return self._ready.popleft()
            finally:
                self._wanted -= 1
                self._changed.notify_all()

    def give_back(self, name: str) -> None:
        """Drop ``name`` (in the background: the caller does not wait)."""
        with self._changed:
            self._used.append(name)
            self._changed.notify_all()

    def close(self) -> None:
        """Drop every clone, used or ready; wait for it."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()

    def _next_step(self) -> tuple[str, str] | None:
        """What the thread does next: clone (a test waits, or fewer are ready than wanted),
        drop, or nothing left (closing)."""
        with self._changed:
            while True:
                short = len(self._ready) < self._ready_target + self._wanted
                if not self._closing and self._error is None and short:
                    return ("clone", f"forager_t_{uuid.uuid4().hex[:12]}")
                if self._used:
                    return ("drop", self._used.popleft())
                if self._closing:
                    if self._ready:
                        return ("drop", self._ready.popleft())
                    return None
                self._changed.wait()

    def _run(self) -> None:
        asyncio.run(self._work())  # the thread's own loop; it blocks in _next_step between steps

    async def _work(self) -> None:
        conn: asyncpg.Connection | None = None
        try:
            conn = await self._connect()
            while (step := self._next_step()) is not None:
                what, name = step
                if what == "clone":
                    try:
                        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
                    except asyncpg.PostgresError as exc:  # the server said no: that test fails
                        with self._changed:
                            self._error = exc
                            self._changed.notify_all()
                        continue
                    with self._changed:
                        self._ready.append(name)
                        self._changed.notify_all()
                else:
                    with contextlib.suppress(asyncpg.PostgresError):  # left behind, no test's
                        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except BaseException as exc:  # kept for take() to raise: no traceback from a thread
            with self._changed:
                self._dead = exc
                self._changed.notify_all()
        finally:
            if conn is not None:
                await conn.close()
