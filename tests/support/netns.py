"""Hosts in network namespaces of their own: one for the egress-policy tests (``TestNetwork``),
many on one virtual LAN for the tests of many machines (``Lab``).

``TestNetwork`` creates a namespace and a veth pair, gives the namespace end three addresses —
a private one (10.x.y.2), a globally routable-looking one (11.x.y.z, a /32 that exists only
there, routed from here through this veth alone) and a link-local one (169.254.x.y) — and
runs this module's small HTTP server on all three inside the namespace. Everything is removed
on exit. Nothing leaves the machine: the routes point only at the veth.

The server answers ``/page`` (a page naming the host), ``/to?url=U`` (302 to ``U``) and
``/robots.txt`` (302 to ``robots_to`` when given at start, else a plain file); ``/__log``
lists ``local-address path`` for every connection and request (to show a host was never
reached)::

    with TestNetwork() as net:
        net.url("public", "/to?url=" + net.url("private", "/page"))
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.running import Running

ROOT = Path(__file__).resolve().parents[2]


def missing() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return None


def _ip(*args: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True)


class TestNetwork(Running):
    """The namespace, its addresses and its server (see the module docstring)."""

    __test__ = False

    def __init__(self) -> None:
        tag = f"{os.getpid() % 10000}{random.randrange(1000):03d}"
        self.netns = f"fgtest{tag}"
        self.veth = f"fgv{tag}"
        a, b = random.randrange(1, 250), random.randrange(1, 63) * 4
        self.here = f"10.{a}.{b}.1"
        self.hosts = {
            "private": f"10.{a}.{b}.2",
            "public": f"11.{a}.{b // 4}.{random.randrange(1, 250)}",
            "link_local": f"169.254.{a}.{random.randrange(1, 250)}",
        }
        self.port = random.randrange(20000, 30000)
        self.robots_to: str | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._routes: list[str] = []

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{self.hosts[host]}:{self.port}{path}"

    def start(self, robots_to: str | None = None) -> None:
        _ip("netns", "add", self.netns)
        try:
            _ip(
                "link",
                "add",
                self.veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                self.netns,
            )
            _ip("addr", "add", f"{self.here}/30", "dev", self.veth)
            _ip("link", "set", self.veth, "up")
            inside = self.netns
            _ip("link", "set", "lo", "up", netns=inside)
            _ip("addr", "add", f"{self.hosts['private']}/30", "dev", "eth0", netns=inside)
            for name in ("public", "link_local"):
                _ip("addr", "add", f"{self.hosts[name]}/32", "dev", "eth0", netns=inside)
            _ip("link", "set", "eth0", "up", netns=inside)
            for name in ("public", "link_local"):
                _ip("route", "add", f"{self.hosts[name]}/32", "dev", self.veth, "src", self.here)
                self._routes.append(self.hosts[name])
            self._serve(robots_to)
        except BaseException:
            self.stop()
            raise

    def _serve(self, robots_to: str | None) -> None:
        argv = [sys.executable, "-m", "tests.support.netns", str(self.port)]
        argv += list(self.hosts.values())
        env = {**os.environ, "FORAGER_NETNS_ROBOTS_TO": robots_to or ""}
        self._server = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, *argv], cwd=ROOT, env=env
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                self.log("private")
                return
            except OSError:
                if self._server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the namespace's server did not start") from None
                time.sleep(0.05)

    def log(self, host: str) -> list[str]:
        """The requests the server saw on ``host``'s address (``/__log`` itself excluded)."""
        with urllib.request.urlopen(self.url(host, "/__log"), timeout=5) as answer:
            entries: list[str] = json.loads(answer.read())
        return [e.split(" ", 1)[1] for e in entries if e.split(" ", 1)[0] == self.hosts[host]]

    def stop(self) -> None:
        if self._server is not None:
            self._server.terminate()
            self._server.wait(timeout=10)
            self._server = None
        for address in self._routes:
            subprocess.run(["ip", "route", "del", f"{address}/32"], capture_output=True)
        self._routes = []
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)


class Lab(Running):
    """Hosts on one virtual LAN, for tests of many machines: a bridge here whose address
    (``gateway``) reaches this machine's services, and per host a namespace with a veth on the
    bridge and its own addresses (``hosts`` maps a name to how many). ``cut`` takes a host off
    the network (its link goes down; its processes live on). Everything is removed on exit::

        with Lab({"site": 4, "w1": 1}) as lab:
            lab.addresses["site"]  # ["10.x.y.2", …, "10.x.y.5"]
            subprocess.Popen([*lab.wrap("w1"), "forager", "worker"])
    """

    __test__ = False

    def __init__(self, hosts: dict[str, int]) -> None:
        tag = f"{os.getpid() % 10000}{random.randrange(1000):03d}"
        self.bridge = f"fgb{tag}"
        taken = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
        while True:
            subnet = f"10.{random.randrange(200, 250)}.{random.randrange(1, 255)}"
            if f" {subnet}." not in taken:
                break
        self.gateway = f"{subnet}.1"
        self.addresses: dict[str, list[str]] = {}
        self._netns = {name: f"fglab{tag}{name}" for name in hosts}
        self._veths = {name: f"fgl{tag}{i}" for i, name in enumerate(hosts)}
        n = 2
        for name, count in hosts.items():
            self.addresses[name] = [f"{subnet}.{n + k}" for k in range(count)]
            n += count

    def wrap(self, host: str) -> list[str]:
        """The command prefix that runs a program on ``host`` (``ip netns exec`` execs it)."""
        return ["ip", "netns", "exec", self._netns[host]]

    def start(self) -> None:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for host, netns in self._netns.items():
                veth = self._veths[host]
                _ip("netns", "add", netns)
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
                _ip("link", "set", veth, "master", self.bridge)
                _ip("link", "set", veth, "up")
                _ip("link", "set", "lo", "up", netns=netns)
                for address in self.addresses[host]:
                    _ip("addr", "add", f"{address}/24", "dev", "eth0", netns=netns)
                _ip("link", "set", "eth0", "up", netns=netns)
                _ip("route", "add", "default", "via", self.gateway, netns=netns)
        except BaseException:
            self.stop()
            raise

    def cut(self, host: str) -> None:
        """Take ``host`` off the network: nothing it sends arrives, nothing reaches it."""
        _ip("link", "set", self._veths[host], "down")

    def stop(self) -> None:
        for host, netns in self._netns.items():
            subprocess.run(["ip", "link", "del", self._veths[host]], capture_output=True)
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


# -- the server inside the namespace --------------------------------------------------------


async def _serve(port: int, hosts: list[str]) -> None:
    seen: list[str] = []
    robots_to = os.environ.get("FORAGER_NETNS_ROBOTS_TO", "")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            local = writer.get_extra_info("sockname")[0]
            head = await reader.readuntil(b"\r\n\r\n")
            target = head.split(b" ", 2)[1].decode()
            if target != "/__log":
                seen.append(f"{local} connect")  # logged once the request shows who it is
            status, headers, body = 200, {"Content-Type": "text/html"}, b""
            if target == "/__log":
                body, headers = json.dumps(seen).encode(), {"Content-Type": "application/json"}
            else:
                seen.append(f"{local} {target}")
                if target.startswith("/to?url="):
                    status, headers["Location"] = 302, target.removeprefix("/to?url=")
                elif target == "/robots.txt" and robots_to:
                    status, headers["Location"] = 302, robots_to
                elif target == "/robots.txt":
                    body, headers = (
                        b"User-agent: *\nDisallow: /nothing\n",
                        {"Content-Type": "text/plain"},
                    )
                else:
                    body = f"<html><body><h1>served by {local}</h1></body></html>".encode()
            lines = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in headers.items())]
            lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
            writer.write("\r\n".join(lines).encode() + body)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    servers = [await asyncio.start_server(handle, host, port) for host in hosts]
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(_serve(int(sys.argv[1]), sys.argv[2:]))
