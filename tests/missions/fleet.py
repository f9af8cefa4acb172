"""What the mission tests run: reference worker and writer services as real processes, a
misbehaving service for the fault tests, proxies on loopback, and the database set-up that
registers them all with Forager."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import Event, Mission, Proxy, WorkerService, Writer
from forager.missions import control, endpoints
from forager.missions.runner import MissionRunner
from forager.missions.states import MissionEvent
from tests.support.proxy import TestProxy

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "svc-test-key-0123456789"

# Every orchestrator clock in milliseconds (seed §8.2 has them in seconds and minutes).
FAST = {
    "mission_loop_seconds": 0.05,
    "mission_session_poll_seconds": 0.03,
    "mission_session_timeout_seconds": 10.0,
    "mission_job_poll_seconds": 0.03,
    "mission_job_timeout_seconds": 60.0,
    "mission_writer_poll_seconds": 0.03,
    "mission_writer_timeout_seconds": 60.0,
    "mission_http_timeout_seconds": 10.0,
    "mission_leader_lease_seconds": 10.0,  # kill tests shorten it
}


class ServiceProcess:
    """``forager worker-service`` or ``forager writer-service`` in its own process."""

    def __init__(self, command: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.command = command
        self.args = list(args)
        self.extra_env = env or {}
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix=f"forager-{command}-")
        self.dir = Path(self._tmp.name)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServiceProcess:
        port_file = self.dir / "port"
        env = {**os.environ, "FORAGER_SERVICE_API_KEY": API_KEY, "FORAGER_LOG_LEVEL": "WARNING"}
        env.setdefault("FORAGER_DATA_DIR", str(self.dir / "data"))
        env.update(self.extra_env)
        with (self.dir / "log").open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "forager.cli",
                    self.command,
                    "--port",
                    "0",
                    "--port-file",
                    str(port_file),
                    *self.args,
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def wait_ready(self, timeout: float = 180) -> ServiceProcess:
        port_file = self.dir / "port"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.proc is not None and self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, f"{self.command} did not start\n{self.log()}"
            time.sleep(0.02)
        self.port = int(port_file.read_text())
        return self

    def log(self) -> str:
        path = self.dir / "log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
        self._tmp.cleanup()

    def faults(self, **faults: Any) -> None:
        """What its next sessions / jobs do wrong (the worker service's ``POST /faults``)."""
        answer = httpx.post(f"{self.url}/faults", json=faults, headers={"x-api-key": API_KEY})
        answer.raise_for_status()


def worker_service(target: str) -> ServiceProcess:
    return ServiceProcess("worker-service", "--target", target, "--timeout", "5", "--allow-faults")


def writer_service(database_url: str, *args: str) -> ServiceProcess:
    return ServiceProcess("writer-service", *args, env={"FORAGER_DATABASE_URL": database_url})


def start_all(*services: ServiceProcess) -> None:
    """Start them together (their start-ups overlap), then wait for each."""
    for service in services:
        service.start()
    for service in services:
        service.wait_ready()


async def register(
    db: Database,
    settings: Settings,
    *,
    workers: list[str],
    writers: list[str],
    proxies: list[TestProxy],
    key: str = API_KEY,
) -> None:
    """Worker services (their storage served by themselves), writers and named proxies."""
    box = SecretBox(settings)
    for n, url in enumerate(workers, 1):
        values = {
            "name": f"worker-{n}",
            "url": url,
            "api_key": key,
            "storage_domain": f"{url}/storage",
        }
        await endpoints.create(db, box, WorkerService, values)
    for n, url in enumerate(writers, 1):
        await endpoints.create(db, box, Writer, {"name": f"writer-{n}", "url": url, "api_key": key})
    async with db.session() as session:
        for n, proxy in enumerate(proxies, 1):
            session.add(
                Proxy(
                    name=f"proxy-{n}",
                    proxy_url="127.0.0.1",
                    proxy_port=proxy.port,
                    proxy_protocol="http",
                    proxy_username=proxy.username,
                    proxy_password=box.encrypt(proxy.password) if proxy.password else None,
                )
            )


async def run_until_idle(db: Database, settings: Settings, timeout: float = 180) -> MissionRunner:
    """ "Iniciar", then run the orchestrator here until the run ends by itself."""
    await control.request_run(db, "test")
    runner = MissionRunner(db, settings, SecretBox(settings))
    async with asyncio.timeout(timeout):
        await runner.run(until_idle=True)
    return runner


@contextlib.asynccontextmanager
async def running(db: Database, settings: Settings) -> AsyncIterator[MissionRunner]:
    """The orchestrator running in the background; stopped (not finished) on exit."""
    await control.request_run(db, "test")
    runner = MissionRunner(db, settings, SecretBox(settings))
    task = asyncio.create_task(runner.run(until_idle=True))
    try:
        yield runner
    finally:
        runner.stop()
        await asyncio.wait_for(task, 120)


async def missions(db: Database) -> list[Mission]:
    async with db.reader() as session:
        return list(await session.scalars(select(Mission).order_by(Mission.id)))


async def events(db: Database, entity_type: str, entity_id: int | None = None) -> list[Event]:
    """Events of the seed's vocabulary (not the registry's ``created``, ``tested``…)."""
    async with db.reader() as session:
        query = select(Event).where(
            Event.entity_type == entity_type, Event.event.in_(list(MissionEvent))
        )
        if entity_id is not None:
            query = query.where(Event.entity_id == str(entity_id))
        return list(await session.scalars(query.order_by(Event.id)))


async def names(db: Database, mission_id: int, *, progress: bool = False) -> list[str]:
    """The mission's own event names in order (progress events left out unless asked)."""
    found = [e.event for e in await events(db, "mission", mission_id)]
    return found if progress else [n for n in found if not n.endswith("_progress")]


async def wait_for(check: Any, timeout: float = 120, every: float = 0.02) -> Any:
    """Poll ``check()`` (async) until it returns something truthy."""
    async with asyncio.timeout(timeout):
        while not (found := await check()):
            await asyncio.sleep(every)
    return found


def forager_env(settings: Settings, **overrides: Any) -> dict[str, str]:
    """The environment of a Forager process on the test's database, with the fast clocks."""
    secret = settings.secret_key.get_secret_value() if settings.secret_key else ""
    env = {
        **os.environ,
        "FORAGER_DATABASE_URL": settings.resolved_database_url,
        "FORAGER_DATA_DIR": str(settings.data_dir),
        "FORAGER_SECRET_KEY": secret,
        "FORAGER_LOG_LEVEL": "INFO",
    }
    for name, value in {**FAST, **overrides}.items():
        env[f"FORAGER_{name.upper()}"] = str(value)
    return env


class OrchestratorProcess:
    """``forager orchestrate`` in its own process (to be killed with SIGKILL)."""

    def __init__(self, settings: Settings, log: Path, **overrides: Any) -> None:
        env = forager_env(settings, **overrides)
        self.log_path = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "forager.cli", "orchestrate"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    async def exited(self, timeout: float = 180) -> int:
        async with asyncio.timeout(timeout):
            while (code := self.proc.poll()) is None:
                await asyncio.sleep(0.05)
        return code

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


class ServeProcess:
    """``forager serve`` (no built-in crawl workers) with the fast mission clocks."""

    def __init__(self, settings: Settings, log: Path, port: int, **overrides: Any) -> None:
        env = forager_env(settings, serve_workers=0, **overrides)
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "forager.cli", "serve", "--port", str(port)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    async def ready(self, timeout: float = 180) -> None:
        async with asyncio.timeout(timeout), httpx.AsyncClient() as http:
            while True:
                assert self.proc.poll() is None, self.log()
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{self.url}/health", timeout=2)).status_code < 600:
                        return
                await asyncio.sleep(0.1)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]
