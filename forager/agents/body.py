"""Receiving a response body from an agent: gzip chunks in, bounded bytes out.

The limit holds on the server whatever the agent declares: the decompressed size stops at
``max_body_bytes`` (the bounded decoders every fetcher uses), so a lying or broken
agent costs at most the limit in memory.
"""

from __future__ import annotations

from forager.agents.protocol import ERROR_BODY_BYTES, Result
from forager.errors import FetchError, HTTPStatusError, TooLarge, effect
from forager.fetch.base import FetchResponse
from forager.fetch.decode import BoundedDecoder

# gzip of incompressible data is slightly larger than the data itself.
_GZIP_SLACK = 64 * 1024


def failure(header: Result, body: bytes = b"") -> FetchError:
    """The error of a failed ``result``: an HTTP error answer keeps its status, headers and the
    start of its body, as a local fetch's ``HTTPStatusError`` does, for the same ban checks.

    Which types an agent may report, and which are an error status, is ``from_agent`` and
    ``http_status`` in ``forager.errors.EFFECTS``; any other type is taken as ``network``.
    """
    text = header.message or "the agent's fetch failed"
    status = header.status_code
    said = effect(header.error_type)
    if status is not None and status >= 400 and said.http_status:
        return HTTPStatusError(
            text,
            status_code=status,
            headers={k.lower(): v for k, v in header.headers.items()},
            body=body[:ERROR_BODY_BYTES],
        )
    kind = header.error_type if said.from_agent else "network"
    return FetchError(text, status_code=status, error_type=kind)


def wants_body(header: Result) -> bool:
    """True when binary frames follow this result (a page, or the start of an error page)."""
    return header.ok or (header.body_bytes > 0 and isinstance(failure(header), HTTPStatusError))


class BodyReceiver:
    """Collects one task's body from its binary frames, refusing it once it is too large."""

    def __init__(self, header: Result, limit: int, url: str) -> None:
        self.header = header
        self.url = url
        self.limit = limit
        self.wire = 0
        self.decoder = BoundedDecoder(header.encoding, limit)

    def feed(self, chunk: bytes) -> None:
        self.wire += len(chunk)
        if self.wire > self.limit + _GZIP_SLACK:
            raise TooLarge(f"compressed body exceeds the {self.limit} byte limit")
        self.decoder.feed(chunk)

    def finish(self) -> FetchResponse | FetchError:
        h = self.header
        if not h.ok:
            return failure(h, self.decoder.finish())
        body = self.decoder.finish()
        return FetchResponse(
            url=h.final_url or self.url,
            status_code=h.status_code or 200,
            headers={k.lower(): v for k, v in h.headers.items()},
            body=body,
            elapsed_ms=h.elapsed_ms,
            cookies=dict(h.cookies),
        )
