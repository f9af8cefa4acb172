"""Real servers and agents for the agent tests: `forager serve` / `forager agent run` processes,
and the app on an in-process uvicorn for tests that speak the protocol by hand."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from forager.agents.protocol import MAX_MESSAGE_BYTES
from forager.config import Settings

ROOT = Path(__file__).resolve().parents[2]
# Every process started here, so a test's teardown can make sure none outlives it.
STARTED: list[subprocess.Popen[bytes]] = []


def reap_started() -> None:
    """Kill and wait for any process started here that is still running."""
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_env(settings: Settings, **extra: str) -> dict[str, str]:
    """Environment for a `forager serve` child using the test's database and data dir."""
    return {
        **os.environ,
        "FORAGER_DATABASE_URL": settings.resolved_database_url,
        "FORAGER_DATA_DIR": str(settings.data_dir),
        "FORAGER_SECRET_KEY": settings.secret_key.get_secret_value() if settings.secret_key else "",
        "FORAGER_SERVE_WORKERS": "0",  # only agents fetch
        "FORAGER_POLL_SECONDS": str(settings.poll_seconds),
        "FORAGER_SCHEDULER_SECONDS": str(settings.scheduler_seconds),
        "FORAGER_HEARTBEAT_SECONDS": str(settings.heartbeat_seconds),
        "FORAGER_LEASE_SECONDS": str(settings.lease_seconds),
        "FORAGER_AGENT_HEARTBEAT_SECONDS": str(settings.agent_heartbeat_seconds),
        "FORAGER_AGENT_TIMEOUT_SECONDS": str(settings.agent_timeout_seconds),
        "FORAGER_RETRY_BASE_SECONDS": str(settings.retry_base_seconds),
        "FORAGER_RETRY_MAX_SECONDS": str(settings.retry_max_seconds),
        "FORAGER_LOG_LEVEL": "INFO",
        **extra,
    }


class ServeProcess:
    """`forager serve` in its own process on a fixed port (so it can be restarted on it)."""

    def __init__(self, settings: Settings, log_dir: Path, port: int | None = None) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180) -> None:
        self.starts += 1
        with (self.log_dir / f"serve-{self.starts}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "forager.cli", "serve", "--port", str(self.port)],
                env=server_env(self.settings),
                cwd=self.log_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        STARTED.append(self.proc)
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.log()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code < 600:
                    return
            assert time.monotonic() < deadline, "forager serve did not come up\n" + self.log()
            time.sleep(0.1)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.proc = None
        return code

    def log(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.log_dir.glob("serve-*.log"))
        )


class AgentProcess:
    """`forager agent run` as a user runs it; the token travels in the environment."""

    def __init__(
        self, server_url: str, token: str, log_path: Path, *args: str, concurrency: int = 1
    ) -> None:
        self.log_path = log_path
        env = {**os.environ, "FORAGER_AGENT_TOKEN": token}
        env.pop("FORAGER_DATABASE_URL", None)  # an agent has no database
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "forager.cli",
                    "agent",
                    "run",
                    "--server",
                    server_url,
                    "--concurrency",
                    str(concurrency),
                    "--shutdown-seconds",
                    "10",
                    *args,
                ],
                env=env,
                cwd=log_path.parent,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        STARTED.append(self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise

    async def exited(self, timeout: float = 30) -> int:
        """Wait for the process to end without blocking the event loop (an in-process server
        may need it to answer the agent)."""
        async with asyncio.timeout(timeout):
            while (code := self.proc.poll()) is None:
                await asyncio.sleep(0.05)
        return code

    async def astop(self, timeout: float = 30) -> int:
        """SIGTERM, then wait for a clean exit without blocking the event loop."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await self.exited(timeout)
        except TimeoutError:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@contextlib.asynccontextmanager
async def app_server(settings: Settings) -> AsyncIterator[tuple[str, Any]]:
    """The real app (lifespan, hub) on uvicorn on 127.0.0.1 in this event loop: (base URL, app)."""
    from forager.app import create_app

    app = create_app(settings)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        ws_max_size=MAX_MESSAGE_BYTES,
        ws_ping_interval=None,  # as `forager serve`
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    runner = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not runner.done(), runner.exception()
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app
    finally:
        server.should_exit = True
        await runner
        sock.close()


class InProcessServe:
    """The app served by ``app_server`` (its log is the test's own)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def log(self) -> str:
        return ""


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def all_logs(*procs: AgentProcess | ServeProcess | InProcessServe) -> str:
    return "\n\n".join(tail(p.log()) for p in procs)


def agent_args(allow: Sequence[str] = ()) -> list[str]:
    return [arg for domain in allow for arg in ("--allow-domain", domain)]
