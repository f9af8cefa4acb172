"""Bounded content decoding: every body Forager reads is undone here, never by a client library.

``Content-Encoding`` may name gzip, deflate, br and zstd, stacked up to ``MAX_LAYERS`` deep
(``gzip, gzip`` is legal and a favourite of decompression bombs). Each layer hands the next at
most ``CHUNK`` bytes at a time, and every layer's output is counted against the limit, so a
bomb costs at most the limit (plus a chunk per layer) in memory, whatever its ratio. zstd
frames asking for a window over 8 MB are refused (RFC 9659 caps HTTP's zstd window there).
``ACCEPT_ENCODING`` offers exactly what this module decodes.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import brotli  # type: ignore[import-untyped]
import zstandard

from forager.errors import FetchError, TooLarge

ACCEPT_ENCODING = "gzip, deflate, br, zstd"
MAX_LAYERS = 3
CHUNK = 64 * 1024
ZSTD_MAX_WINDOW = 8 * 1024 * 1024


class _Sink(Protocol):
    def write(self, data: bytes) -> int: ...


class _Full(Exception):
    """A truncating decoder has its ``limit`` bytes: the rest is not wanted."""


class _Collector:
    """The last stage: keeps the decoded body and refuses the byte past ``limit`` (or, when
    truncating, keeps exactly ``limit`` bytes and stops there)."""

    def __init__(self, limit: int, truncate: bool) -> None:
        self.limit = limit
        self.truncate = truncate
        self.size = 0
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        if self.size + len(data) > self.limit:
            if not self.truncate:
                raise TooLarge(f"body exceeds the {self.limit} byte limit (after decompression)")
            self.parts.append(data[: self.limit - self.size])
            self.size = self.limit
            raise _Full
        self.size += len(data)
        self.parts.append(data)
        return len(data)


class _Counted:
    """An inner layer's output, counted against the limit before the next layer sees it."""

    def __init__(self, sink: _Sink, limit: int) -> None:
        self.sink = sink
        self.limit = limit
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self.limit:
            raise TooLarge(f"body exceeds the {self.limit} byte limit (after decompression)")
        return self.sink.write(data)


class _Zlib:
    """gzip (several members too) or deflate (zlib-wrapped, or raw as some servers send it)."""

    def __init__(self, sink: _Sink, gzip: bool) -> None:
        self.sink = sink
        self.gzip = gzip
        self.started = False  # this stream has produced output: no more guessing its format
        self.done = False  # past the last member: what follows is ignored, as browsers do
        self.z = zlib.decompressobj(wbits=47 if gzip else 15)  # 47: gzip or zlib, auto-detected
        self._first = self.z

    def _decompress(self, data: bytes) -> bytes:
        try:
            return self.z.decompress(data, CHUNK)
        except zlib.error:
            if self.started:
                raise
            if self.gzip and self.z is not self._first:
                self.done = True  # junk after a complete gzip member
                return b""
            if self.gzip:
                raise
            self.z = zlib.decompressobj(wbits=-15)  # "deflate" sent as a raw stream
            return self.z.decompress(data, CHUNK)

    def write(self, data: bytes) -> int:
        size = len(data)
        try:
            while data and not self.done:
                piece = self._decompress(data)
                if piece:
                    self.started = True
                    self.sink.write(piece)
                if self.z.eof:
                    data = self.z.unused_data
                    if not self.gzip or not data.strip(b"\0"):
                        self.done = not self.gzip
                        break
                    self.z, self.started = zlib.decompressobj(wbits=31), False  # next member
                else:
                    data = self.z.unconsumed_tail
        except zlib.error as exc:
            raise FetchError(f"corrupt compressed body: {exc}", error_type="network") from exc
        return size

    def close(self) -> None:
        if self.done:
            return
        try:
            tail = self.z.flush()
        except zlib.error as exc:
            raise FetchError(f"corrupt compressed body: {exc}", error_type="network") from exc
        if tail:
            self.sink.write(tail)


class _Brotli:
    def __init__(self, sink: _Sink) -> None:
        self.sink = sink
        self.d = brotli.Decompressor()

    def write(self, data: bytes) -> int:
        # Drained until the decoder has nothing more: ``can_accept_more_data()`` says True while
        # output is still pending once the input is all consumed (brotli 1.2), which cut a
        # body short after its first ~100 KB whenever a little input decodes to a lot.
        try:
            piece = self.d.process(data, output_buffer_limit=CHUNK)
            while piece:
                self.sink.write(piece)
                piece = self.d.process(b"", output_buffer_limit=CHUNK)
        except brotli.error as exc:
            raise FetchError(f"corrupt brotli body: {exc}", error_type="network") from exc
        return len(data)

    def close(self) -> None:
        pass


class _Zstd:
    def __init__(self, sink: _Sink) -> None:
        decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        self.writer = decompressor.stream_writer(
            sink,  # type: ignore[arg-type]  # only its write() is called
            write_size=CHUNK,
            write_return_read=True,
        )

    def write(self, data: bytes) -> int:
        try:
            self.writer.write(data)
        except zstandard.ZstdError as exc:
            raise FetchError(
                f"corrupt or oversized zstd body: {exc}", error_type="network"
            ) from exc
        return len(data)

    def close(self) -> None:
        pass


def _layer(name: str, sink: _Sink) -> _Zlib | _Brotli | _Zstd:
    if name in ("gzip", "x-gzip"):
        return _Zlib(sink, gzip=True)
    if name == "deflate":
        return _Zlib(sink, gzip=False)
    if name == "br":
        return _Brotli(sink)
    if name == "zstd":
        return _Zstd(sink)
    raise FetchError(f"unsupported Content-Encoding {name!r}", error_type="network")


class BoundedDecoder:
    """Undo a ``Content-Encoding`` chain while never producing more than ``limit`` bytes."""

    def __init__(self, content_encoding: str, limit: int, *, truncate: bool = False) -> None:
        names = [n.strip().lower() for n in content_encoding.split(",")]
        names = [n for n in names if n and n != "identity"]
        if len(names) > MAX_LAYERS:
            raise FetchError(
                f"Content-Encoding {content_encoding!r} stacks more than {MAX_LAYERS} codings",
                error_type="network",
            )
        self.limit = limit
        self.wire = 0
        self.truncated = False  # ``truncate`` and the limit was reached: nothing more is read
        self._body = _Collector(limit, truncate)
        sink: _Sink = self._body
        self._layers: list[_Zlib | _Brotli | _Zstd] = []
        # The last coding applied is the first undone: build the chain from the body outwards.
        for position, name in enumerate(names):
            layer = _layer(name, sink if position == 0 else _Counted(sink, limit))
            self._layers.append(layer)
            sink = layer
        self._head: _Sink = sink

    @property
    def size(self) -> int:
        """Decoded bytes so far."""
        return self._body.size

    def feed(self, data: bytes) -> None:
        self.wire += len(data)
        if self.truncated:
            return
        try:
            self._head.write(data)
        except _Full:
            self.truncated = True

    def partial(self) -> bytes:
        """What was decoded so far, for a body that was cut short on purpose."""
        return b"".join(self._body.parts)

    def finish(self) -> bytes:
        if self.truncated:
            return self.partial()
        for layer in reversed(self._layers):  # outermost first, so its tail reaches the inner
            layer.close()
        return b"".join(self._body.parts)
