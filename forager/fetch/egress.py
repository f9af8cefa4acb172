"""Where requests may go (DESIGN.md decision 11): ``FORAGER_PRIVATE_TARGETS``, checked per address.

Every address a fetch would connect to is classified:

- *refused*: link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10,
  100.100.100.200, fd00:ec2::254 …), unspecified, multicast and broadcast — never fetched;
- *private*: anything not globally routable (loopback, RFC 1918, ULA, CGNAT, documentation);
- *public*: the rest.

The setting decides about private addresses: ``all`` allows them, ``none`` refuses them, and
``submitted`` (default) allows them only for the host of the URL the operator submitted (the
task's own host); a redirect or robots.txt hop to any other private host is refused. IPv6 forms
that embed an IPv4 address (mapped, NAT64) are judged by that address.

Fetchers resolve a host once (``resolve``), check the addresses (``allowed_addresses``) and
connect to a checked address, so DNS cannot answer differently between check and connect.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from forager.errors import EgressDenied, NetworkError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Kind = Literal["public", "private", "refused"]
PRIVATE_TARGETS = ("submitted", "all", "none")

_REFUSED = [
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",  # IPv4 link-local; 169.254.169.254 is AWS/GCP/Azure/OCI metadata
        "fe80::/10",  # IPv6 link-local
        "100.100.100.200/32",  # Alibaba Cloud metadata
        "fd00:ec2::254/128",  # AWS metadata over IPv6
        "0.0.0.0/8",  # "this network": 0.0.0.0 reaches the local host
        "::/128",
        "224.0.0.0/4",  # multicast
        "ff00::/8",
        "255.255.255.255/32",
    )
]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_CACHE_SECONDS = 30.0
_CACHE_SIZE = 4096


@lru_cache(maxsize=4096)  # a pure function of the address: safe to remember
def classify(address: IPAddress) -> Kind:
    """``refused``, ``private`` or ``public`` for one address (see the module docstring)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return classify(embedded)
    if any(address in network for network in _REFUSED):
        return "refused"
    return "public" if address.is_global else "private"


@lru_cache(maxsize=4096)
def literal(host: str) -> IPAddress | None:
    """``host`` as an address when it is one (``[::1]`` included), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """``FORAGER_PRIVATE_TARGETS`` applied to one fetch, whose first URL has ``submitted_host``."""

    mode: str = "submitted"
    submitted_host: str | None = None

    def private_ok(self, host: str) -> bool:
        """May ``host`` be at a private address on this fetch?"""
        if self.mode == "all":
            return True
        return self.mode == "submitted" and _same_host(host, self.submitted_host)

    def check(self, host: str, address: IPAddress) -> None:
        """Raise ``EgressDenied`` unless ``host`` may be reached at ``address``."""
        kind = classify(address)
        if kind == "refused":
            raise EgressDenied(f"{host} is at {address}, a link-local or metadata address")
        if kind == "private" and not self.private_ok(host):
            why = (
                "FORAGER_PRIVATE_TARGETS=none"
                if self.mode == "none"
                else "only the submitted host may be private (FORAGER_PRIVATE_TARGETS=submitted)"
            )
            raise EgressDenied(f"{host} is at the private address {address}; {why}")


def _same_host(a: str, b: str | None) -> bool:
    return b is not None and a.strip("[]").rstrip(".").lower() == b.strip("[]").rstrip(".").lower()


class Resolver:
    """getaddrinfo with a short cache (of answers, each checked at every use: no verdicts)."""

    def __init__(self) -> None:
        self._cache: OrderedDict[str, tuple[float, list[IPAddress]]] = OrderedDict()

    async def resolve(self, host: str) -> list[IPAddress]:
        """The addresses of ``host`` (itself when it is an address), in the resolver's order."""
        address = literal(host)
        if address is not None:
            return [address]
        now = time.monotonic()
        cached = self._cache.get(host)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, None, type=socket.SOCK_STREAM
            )
        except (OSError, UnicodeError) as exc:
            raise NetworkError(f"could not resolve {host}: {exc}") from exc
        addresses: list[IPAddress] = []
        for info in infos:
            found = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
            if found not in addresses:
                addresses.append(found)
        self._cache[host] = (now + _CACHE_SECONDS, addresses)
        self._cache.move_to_end(host)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return addresses

    async def connect_address(self, policy: EgressPolicy, host: str) -> IPAddress:
        """The address to connect to for ``host``: the first one the policy allows.

        Raises ``EgressDenied`` (naming the first refusal) when it allows none.
        """
        refusal: EgressDenied | None = None
        for address in await self.resolve(host):
            try:
                policy.check(host, address)
            except EgressDenied as exc:
                refusal = refusal or exc
                continue
            return address
        raise refusal or NetworkError(f"{host} has no address")

    async def check_all(self, policy: EgressPolicy, host: str) -> None:
        """Before handing ``host`` to a proxy: every address it resolves to here must be allowed
        (the proxy will pick one itself). A name that does not resolve here is left to the
        proxy's own resolver, whose network is not this one."""
        try:
            addresses = await self.resolve(host)
        except NetworkError:
            return
        for address in addresses:
            policy.check(host, address)
