"""``forager serve``'s listening socket: connections accepted from it have Nagle off.

asyncio sets ``TCP_NODELAY`` only on connections of a socket whose protocol reads
``IPPROTO_TCP``; ``socket.create_server`` leaves it 0. With Nagle on, uvicorn's response head
and body (two writes) waited for the client's delayed ACK on every kept-alive request.
"""

from __future__ import annotations

import asyncio
import socket

from forager.cli import _bind


async def _accepted_nodelay(listening: socket.socket) -> int:
    """TCP_NODELAY of the first connection an asyncio server accepts from ``listening``."""
    loop = asyncio.get_running_loop()
    seen: asyncio.Future[int] = loop.create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await loop.create_server(Probe, sock=listening)
    try:
        port = listening.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_serve_accepts_connections_with_nagle_off() -> None:
    listening = _bind("127.0.0.1", 0)
    assert listening.proto == socket.IPPROTO_TCP
    assert await _accepted_nodelay(listening) == 1


async def test_a_socket_create_server_made_would_leave_nagle_on() -> None:
    """The control: why ``_bind`` reads the protocol back."""
    assert await _accepted_nodelay(socket.create_server(("127.0.0.1", 0))) == 0
