"""Apprise's HTTP held to Forager's rules: the egress policy at every connection, one deadline
and a budget for every reply.

Apprise's plugins call ``requests`` themselves and take no transport, so the two places each of
their requests passes through are wrapped once (``install``); the wrappers act only while a
``Call`` is current (a context variable, which Apprise copies into its own worker threads) and
leave every other use of requests and urllib3 as it was:

- urllib3's ``create_connection``: the host is resolved, each address is checked with the
  call's ``EgressPolicy`` and the socket connects to the first one allowed, so the address
  checked is the address connected to (DNS cannot answer differently in between) while TLS
  still verifies the host's name. Every host is checked: the one the operator typed, a vendor's
  fixed host and any host a redirect leads to.
- requests' ``HTTPAdapter.build_response``: a reply's body is read up to ``REPLY_BYTES``.

``Call.end`` shuts down every socket the call opened, so a read blocked on a slow receiver
returns at once and the worker thread finishes; no connection opens after it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from forager.errors import EgressDenied
from forager.fetch.egress import EgressPolicy

REPLY_BYTES = 64 * 1024  # a vendor's JSON answer fits; a receiver's endless one does not
_T = TypeVar("_T")
_current: ContextVar[Call | None] = ContextVar("forager_apprise_call", default=None)
_installed = threading.Lock()
_done = False


class Call:
    """One Apprise send: its policy, its deadline and the first reason Forager stopped it."""

    def __init__(self, policy: EgressPolicy, seconds: float) -> None:
        self.policy = policy
        self.deadline = time.monotonic() + seconds
        self.why: str | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._over = False

    def stop(self, why: str) -> OSError:
        """Remember ``why`` (the first reason wins) and the error that says it to urllib3."""
        self.why = self.why or why
        return OSError(why)

    def opened(self, sock: socket.socket) -> None:
        with self._lock:
            if self._over:
                sock.close()
                raise self.stop("the call was over")
            self._sockets.append(sock.dup())  # TLS takes the original's descriptor over

    def end(self, why: str | None = None) -> None:
        """Shut every socket of the call (blocked reads return) and open no more."""
        with self._lock:
            self._over = True
            if why is not None:
                self.why = self.why or why
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()


def run(call: Call, send: Callable[[], _T]) -> _T:
    """``send()`` (in a worker thread) with ``call`` current, so its requests are confined."""
    install()
    token = _current.set(call)
    try:
        return send()
    finally:
        _current.reset(token)


def install() -> None:
    """Wrap urllib3's connect and requests' reply once per process (inert outside a ``Call``)."""
    global _done
    with _installed:
        if _done:
            return
        import requests.adapters
        import urllib3.util.connection

        connect = urllib3.util.connection.create_connection
        build = requests.adapters.HTTPAdapter.build_response

        def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> Any:
            call = _current.get()
            if call is None:
                return connect(address, *args, **kwargs)
            return _connect(call, address, *args, **kwargs)

        def build_response(self: Any, req: Any, resp: Any) -> Any:
            response = build(self, req, resp)
            call = _current.get()
            if call is not None:
                response.raw = _Budgeted(response.raw, call)
            return response

        urllib3.util.connection.create_connection = create_connection
        requests.adapters.HTTPAdapter.build_response = build_response  # type: ignore[method-assign]
        _done = True


def _connect(
    call: Call,
    address: tuple[str, int],
    timeout: Any = None,
    source_address: tuple[str, int] | None = None,
    socket_options: Any = None,
) -> socket.socket:
    host, port = address
    host = host.strip("[]")
    if time.monotonic() >= call.deadline:
        raise call.stop("the call was over")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise socket.gaierror(f"could not resolve {host}: {exc}") from exc
    refusal: EgressDenied | None = None
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        try:
            call.policy.check(host, ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
        except EgressDenied as exc:
            refusal = refusal or exc
            continue
        sock = socket.socket(family, kind, proto)
        try:
            for option in socket_options or ():
                sock.setsockopt(*option)
            left = max(0.001, call.deadline - time.monotonic())
            sock.settimeout(min(timeout, left) if isinstance(timeout, int | float) else left)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        call.opened(sock)
        return sock
    if refusal is not None:
        raise call.stop(str(refusal))
    raise error or OSError(f"{host} has no address")


class _Budgeted:
    """A requests ``Response.raw`` that yields at most ``REPLY_BYTES`` of the body."""

    def __init__(self, raw: Any, call: Call) -> None:
        self._raw = raw
        self._call = call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def stream(self, amt: int = 2**16, decode_content: bool | None = None) -> Iterator[bytes]:
        import requests

        read = 0
        for chunk in self._raw.stream(amt, decode_content=decode_content):
            read += len(chunk)
            if read > REPLY_BYTES:
                self._raw.close()
                why = f"the reply was longer than {REPLY_BYTES // 1024} KB; not read"
                raise requests.exceptions.ConnectionError(self._call.stop(why))
            yield chunk
