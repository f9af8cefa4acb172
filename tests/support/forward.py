"""A TCP forwarder in its own process: services that listen on loopback only (the machine's
PostgreSQL, the session's SeaweedFS) reached from hosts in network namespaces.

``python -m tests.support.forward LISTEN_HOST TARGET [TARGET ...] --port-file F`` listens on
``LISTEN_HOST`` at one free port per ``TARGET`` (``host:port``) and writes the ports, in order,
to ``F`` once listening; every connection is piped both ways to its target::

    with Forwarder("10.1.2.1", ["127.0.0.1:5432"]) as fwd:
        fwd.address(0)  # "10.1.2.1:40123"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.running import Running

ROOT = Path(__file__).resolve().parents[2]


class Forwarder(Running):
    """The forwarding process (see the module docstring); stopped on exit."""

    def __init__(self, listen_host: str, targets: Sequence[str]) -> None:
        self.listen_host = listen_host
        self.targets = list(targets)
        self.ports: list[int] = []
        self._proc: subprocess.Popen[bytes] | None = None

    def address(self, n: int) -> str:
        return f"{self.listen_host}:{self.ports[n]}"

    def start(self) -> None:
        with tempfile.TemporaryDirectory(prefix="forager-forward-") as tmp:
            port_file = Path(tmp) / "ports"
            argv = [sys.executable, "-m", "tests.support.forward", self.listen_host]
            argv += [*self.targets, "--port-file", str(port_file)]
            if self.ports:  # a restart keeps its ports
                argv += ["--ports", ",".join(map(str, self.ports))]
            self._proc = subprocess.Popen(argv, cwd=ROOT)
            deadline = time.monotonic() + 20
            while not port_file.exists():
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the forwarder did not start")
                time.sleep(0.02)
            self.ports = json.loads(port_file.read_text())

    def restart(self) -> None:
        """Drop every connection (both ends see them closed) and listen again, same ports."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        self._proc = None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


async def _forward(listen_host: str, targets: list[str], ports: list[int], port_file: str) -> None:
    def handler(target: str):  # type: ignore[no-untyped-def]
        host, port = target.rsplit(":", 1)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
            except OSError:
                writer.close()
                return
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

        return handle

    ports = ports or [0] * len(targets)
    servers = [
        await asyncio.start_server(handler(t), listen_host, port)
        for t, port in zip(targets, ports, strict=True)
    ]
    listening = [s.sockets[0].getsockname()[1] for s in servers]
    tmp = f"{port_file}.tmp"
    Path(tmp).write_text(json.dumps(listening))
    os.replace(tmp, port_file)  # readers never see a half-written file
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.forward")
    parser.add_argument("listen_host")
    parser.add_argument("targets", nargs="+", help="host:port to forward to, one port each")
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--ports", default="", help="comma-separated ports (default: free ones)")
    args = parser.parse_args(argv)
    # Every connection ends with the process: the kernel closes both ends of each.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    ports = [int(p) for p in args.ports.split(",") if p]
    asyncio.run(_forward(args.listen_host, args.targets, ports, args.port_file))


if __name__ == "__main__":
    main()
