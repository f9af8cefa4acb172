"""A loopback HTTP server of decompression bombs, and a way to measure what one costs.

``GET /bomb?enc=gzip,gzip&mb=512&status=302&to=/ok`` answers ``status`` with a body of ``mb``
MiB (decoded) compressed by each coding of ``enc`` in turn and labelled so in
``Content-Encoding`` (a redirect goes to ``to``); ``/ok`` is a small page; ``/robots.txt`` is
a stacked-gzip bomb of comment lines; ``/to?url=U`` redirects to ``U``. Bombs are built once
per process, streaming, so the tests never hold the decoded bytes themselves::

    with BombServer() as bombs:
        url = bombs.url("/bomb?enc=br&mb=512")

``peak_growth`` runs an awaitable and returns how much the process's peak resident memory
rose meanwhile (``/proc/self/clear_refs`` resets the peak first).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable
from functools import lru_cache
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

import brotli
import zstandard

from tests.support.proxy import LoopbackServer

T = TypeVar("T")
MIB = 1024 * 1024
OK_PAGE = b"<html><body><h1>bomb-free</h1></body></html>"


def _compress(encoding: str, blocks: list[bytes]) -> list[bytes]:
    """``blocks`` compressed as one stream by ``encoding``, still in pieces."""
    if encoding == "gzip":
        gz = zlib.compressobj(1, zlib.DEFLATED, 31)
        return [*(gz.compress(b) for b in blocks), gz.flush()]
    if encoding == "deflate":
        z = zlib.compressobj(1)
        return [*(z.compress(b) for b in blocks), z.flush()]
    if encoding == "br":
        br = brotli.Compressor(quality=5)
        return [*(br.process(b) for b in blocks), br.finish()]
    if encoding == "zstd":
        zs = zstandard.ZstdCompressor(level=3).compressobj()
        return [*(zs.compress(b) for b in blocks), zs.flush()]
    raise ValueError(f"unknown coding {encoding}")


@lru_cache(maxsize=16)
def bomb(encodings: tuple[str, ...], mib: int, unit: bytes = b"\0") -> bytes:
    """``mib`` MiB of ``unit`` repeated, compressed by each coding in turn (first applied first)."""
    block = (unit * (MIB // len(unit) + 1))[:MIB]

    def raw() -> list[bytes]:
        return [block] * mib  # the same block object: no memory for the decoded size

    pieces = raw()
    for encoding in encodings:
        pieces = [b"".join(p for p in _compress(encoding, pieces) if p)]
    return b"".join(pieces)


class BombServer(LoopbackServer):
    """The bomb server (see the module docstring); one request per connection."""

    name = "bomb-server"

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        target = head.split(b" ", 2)[1].decode()
        self.paths.append(target)
        parts = urlsplit(target)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        status, headers, body = 200, {"Content-Type": "text/html"}, OK_PAGE
        if parts.path == "/bomb":
            encodings = tuple(e.strip() for e in query.get("enc", "gzip").split(",") if e.strip())
            body = await asyncio.to_thread(bomb, encodings, int(query.get("mb", "512")))
            headers["Content-Encoding"] = ", ".join(encodings)
            status = int(query.get("status", "200"))
            if 300 <= status < 400:
                headers["Location"] = query.get("to", "/ok")
        elif parts.path == "/to":  # a plain redirect to ``url``
            status, headers["Location"] = 302, query.get("url", "/ok")
        elif parts.path == "/robots.txt":
            body = await asyncio.to_thread(bomb, ("gzip", "gzip"), 512, b"# bomb\n")
            headers = {"Content-Type": "text/plain", "Content-Encoding": "gzip, gzip"}
        lines = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in headers.items())]
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        writer.write("\r\n".join(lines).encode() + body)
        await writer.drain()


def _peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


async def peak_growth(work: Awaitable[T]) -> tuple[T | BaseException, int]:
    """(``work``'s result or exception, MiB the process's peak resident memory rose by)."""
    Path("/proc/self/clear_refs").write_text("5")  # the peak becomes the current size
    before = _peak_kib()
    try:
        result: T | BaseException = await work
    except Exception as exc:
        result = exc
    return result, (_peak_kib() - before) // 1024
