"""Receiving a response body from an agent: gzip chunks in, bounded bytes out.

The limit holds on the server whatever the agent declares: the decompressed size stops at
``max_body_bytes`` (the same bounded decoder the HTTP fetcher uses), so a lying or broken
agent costs at most the limit in memory.
"""

from __future__ import annotations

from forager.agents.protocol import Result
from forager.errors import TooLarge
from forager.fetch.base import FetchResponse
from forager.fetch.http import _BoundedDecoder

# gzip of incompressible data is slightly larger than the data itself.
_GZIP_SLACK = 64 * 1024


class BodyReceiver:
    """Collects one task's body from its binary frames, refusing it once it is too large."""

    def __init__(self, header: Result, limit: int, url: str) -> None:
        self.header = header
        self.url = url
        self.limit = limit
        self.wire = 0
        self.decoder = _BoundedDecoder(header.encoding, limit)

    def feed(self, chunk: bytes) -> None:
        self.wire += len(chunk)
        if self.wire > self.limit + _GZIP_SLACK:
            raise TooLarge(f"compressed body exceeds the {self.limit} byte limit")
        self.decoder.feed(chunk)

    def finish(self) -> FetchResponse:
        body = self.decoder.finish()
        h = self.header
        return FetchResponse(
            url=h.final_url or self.url,
            status_code=h.status_code or 200,
            headers={k.lower(): v for k, v in h.headers.items()},
            body=body,
            elapsed_ms=h.elapsed_ms,
        )
