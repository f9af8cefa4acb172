"""A job's scope: the same host, the same registrable domain (public-suffix aware) or a list.

The registrable domain comes from ``tldextract``'s bundled Public Suffix List snapshot: no
network fetch, ever (``suffix_list_urls=()``), and no cache directory written.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Any

SCOPES = ("host", "domain", "hosts")


@cache
def _extractor() -> Any:
    """Loaded on first use (it imports ``requests``, ~0.4 s): a job scoped by host never pays."""
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


@lru_cache(maxsize=4096)
def registrable(host: str) -> str:
    """``shop.example.co.uk`` → ``example.co.uk``; an IP address or a bare name is itself."""
    found: str = _extractor()(host).top_domain_under_public_suffix
    return found or host


def scope_hosts(scope: str, start_hosts: list[str], listed: list[str]) -> list[str]:
    """What a job's scope is checked against: its start hosts, their registrable domains, or
    the listed hosts."""
    if scope == "host":
        return sorted(set(start_hosts))
    if scope == "domain":
        return sorted({registrable(h) for h in start_hosts})
    return sorted({h.lower() for h in listed})


def in_scope(scope: str, hosts: tuple[str, ...], host: str) -> bool:
    """Whether ``host`` is inside a scope whose hosts are ``hosts`` (``scope_hosts``)."""
    if scope == "domain":
        return registrable(host) in hosts
    return host in hosts
