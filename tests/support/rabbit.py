"""The machine's RabbitMQ (127.0.0.1:5672, guest/guest), shared by parallel tests: each test
uses queue names of its own prefix and deletes them afterwards."""

from __future__ import annotations

import socket

from kombu import Connection

from forager.queue import dispatch

RABBIT = ("127.0.0.1", 5672)
RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672//"


def rabbit_up() -> bool:
    try:
        with socket.create_connection(RABBIT, timeout=2):
            return True
    except OSError:
        return False


def delete_queues(prefix: str) -> None:
    """Delete the three queues of ``prefix`` (and the messages left in them)."""
    with Connection(RABBIT_URL, connect_timeout=5) as conn:
        channel = conn.default_channel
        for name in dispatch.QUEUES:
            channel.queue_delete(prefix + name)
