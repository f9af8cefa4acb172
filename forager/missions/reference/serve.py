"""Run a reference service's app on uvicorn: bind first (port 0 picks a free one), say where."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import uvicorn
from fastapi import FastAPI


def run(app: FastAPI, host: str, port: int, port_file: Path | None) -> None:
    """Serve until SIGTERM/SIGINT; the bound port goes to ``port_file`` (or stdout)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections of a TCP-protocol socket
    # (with Nagle on, kept-alive requests waited for delayed ACKs).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if port_file is None:
                print(f"listening on http://{host}:{bound}", flush=True)
                return
            tmp = port_file.with_suffix(".tmp")
            tmp.write_text(f"{bound}\n")
            os.replace(tmp, port_file)  # readers never see half a number

    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2
    )
    _Server(config).run(sockets=[sock])
