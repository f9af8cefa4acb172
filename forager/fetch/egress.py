"""Where requests may go (DESIGN.md decision 11): ``FORAGER_PRIVATE_TARGETS``, checked per address.

Every address a fetch would connect to is classified:

- *refused*: link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10,
  100.100.100.200, fd00:ec2::254 …), unspecified, multicast and broadcast — never fetched;
- *private*: anything not globally routable (loopback, RFC 1918, ULA, CGNAT, documentation);
- *public*: the rest.

The setting decides about private addresses: ``all`` allows them, ``none`` refuses them, and
``submitted`` (default) allows them only for the host of the URL the operator submitted (the
task's own host); a redirect or robots.txt hop to any other private host is refused. IPv6 forms
that embed an IPv4 address are judged by that address: IPv4-mapped and -translated,
IPv4-compatible, NAT64 (the well-known ``64:ff9b::/96`` and the local-use ``64:ff9b:1::/48``),
6to4 and Teredo (both of its addresses); where one could be read several ways (the local-use
prefix's length is the operator's choice) the strictest verdict wins.

Fetchers resolve a host once (``resolve``), check the addresses (``allowed_addresses``) and
connect to a checked address, so DNS cannot answer differently between check and connect.

A proxy's host is the operator's own infrastructure: it may be private whatever the setting,
but never link-local or metadata (``check_proxy``, when a proxy is saved and before each
connection to it).
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
from urllib.parse import urlsplit

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
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: the operator picks the length
_COMPATIBLE = ipaddress.ip_network("::/96")  # IPv4-compatible (deprecated, still routable by some)
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765 IPv4-translated
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_SEVERITY: dict[Kind, int] = {"public": 0, "private": 1, "refused": 2}
_CACHE_SECONDS = 30.0
_CACHE_SIZE = 4096


@lru_cache(maxsize=4096)  # a pure function of the address: safe to remember
def classify(address: IPAddress) -> Kind:
    """``refused``, ``private`` or ``public`` for one address (see the module docstring)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded(address)
        if embedded:
            return max((classify(a) for a in embedded), key=_SEVERITY.__getitem__)
    if any(address in network for network in _REFUSED):
        return "refused"
    return "public" if address.is_global else "private"


def _embedded(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses ``address`` carries (none for a plain IPv6 address)."""
    value = int(address)
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address in _NAT64 or address in _TRANSLATED or (address in _COMPATIBLE and value > 1):
        return [ipaddress.IPv4Address(value & 0xFFFFFFFF)]  # ``::`` is 0.0.0.0, ``::1`` loopback
    if address in _LOCAL_NAT64:  # every layout that reads as a destination (not 0.0.0.0/8)
        read = [_rfc6052(value, length) for length in (48, 56, 64, 96)]
        return [a for a in read if a not in _THIS_NETWORK] or [read[-1]]
    if address.sixtofour is not None:
        return [address.sixtofour]
    if address.teredo is not None:
        return list(address.teredo)  # (server, client): the connection involves both
    return []


def _rfc6052(value: int, length: int) -> ipaddress.IPv4Address:
    """The IPv4 address in a NAT64 address of prefix ``length`` (RFC 6052 section 2.2): bits 64-71
    (the "u" octet) are always zero and skipped, the 32 bits start right after the prefix."""
    squeezed = ((value >> 64) << 56) | (value & ((1 << 56) - 1))  # 120 bits without the u octet
    start = length if length <= 64 else length - 8
    return ipaddress.IPv4Address((squeezed >> (120 - start - 32)) & 0xFFFFFFFF)


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

    async def check_proxy(self, proxy: str) -> None:
        """Raise ``EgressDenied`` when the host of ``proxy`` (a URL or a bare host) has a
        link-local or metadata address. A name that does not resolve fails at the connection."""
        host = (urlsplit(proxy).hostname or "") if "://" in proxy else proxy
        await self.check_all(_PROXIES, host)

    async def proxy_address(self, host: str) -> IPAddress:
        """The address to connect to for the proxy at ``host``: its first one ``check_proxy``
        allows (for a caller that opens the connection itself, and so can pin it)."""
        return await self.connect_address(_PROXIES, host)


_PROXIES = EgressPolicy("all")  # every address but link-local and metadata ones
