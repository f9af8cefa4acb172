"""Where requests may go (FORAGER_PRIVATE_TARGETS), for every fetcher and for robots.txt.

The hosts live in a network namespace of the test's own (tests/support/netns.py): a "public"
host at a globally routable-looking address that exists only there, a private one, and a
link-local one. A refusal must come before any connection: the namespace's server logs every
request it gets, and the refused host's log stays as it was.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from forager.agents.client import AgentClient
from forager.config import Settings
from forager.db.engine import Database
from forager.db.models import Domain
from forager.errors import EgressDenied, FetchError
from forager.fetch.base import FetchRequest, FetchResponse
from forager.fetch.egress import EgressPolicy, classify
from forager.fetch.fetcher_set import build_fetcher
from forager.fetch.http import HttpFetcher
from tests.conftest import SettingsFactory, service_missing
from tests.support.bombs import BombServer
from tests.support.crawling import submit
from tests.support.fetching import KINDS, fetch_settings, refresh_robots_now, require
from tests.support.netns import TestNetwork, missing
from tests.support.proxy import TestProxy

UA = "forager-egress-test/1"


@pytest.fixture(scope="module")
def net() -> Iterator[TestNetwork]:
    why = missing()
    if why is not None:
        service_missing("network namespaces", why)
    network = TestNetwork()
    network.start(robots_to=network.url("private", "/robots.txt"))
    try:
        yield network
    finally:
        network.stop()


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return require(request.param)


def _settings(tmp_path: Path, **overrides: Any) -> Settings:
    return fetch_settings(tmp_path, **({"fetch_timeout_seconds": 15.0} | overrides))


async def _fetch(
    kind: str, settings: Settings, url: str, proxy_url: str | None = None
) -> FetchResponse | FetchError:
    fetcher = build_fetcher(kind, settings)
    try:
        return await fetcher.fetch(FetchRequest(url, UA, proxy_url))
    except FetchError as exc:
        return exc
    finally:
        await fetcher.aclose()


# -- the classification -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind_of"),
    [
        ("169.254.169.254", "refused"),  # AWS, GCP, Azure, OCI metadata
        ("169.254.1.1", "refused"),
        ("fe80::1", "refused"),
        ("100.100.100.200", "refused"),  # Alibaba Cloud metadata
        ("fd00:ec2::254", "refused"),  # AWS metadata over IPv6
        ("::ffff:169.254.169.254", "refused"),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", "refused"),  # NAT64 of 169.254.169.254
        ("64:ff9b:1::a9fe:a9fe", "refused"),  # RFC 8215 local-use NAT64, /96 layout
        ("64:ff9b:1:a9fe:a9:fe00::", "refused"),  # the same, /48 layout (u octet skipped)
        ("64:ff9b:1:0:a9:fea9:fe00:0", "refused"),  # the same, /64 layout
        ("64:ff9b:1::a00:1", "private"),  # local-use NAT64 of 10.0.0.1
        ("64:ff9b:1::5db8:d70e", "public"),  # local-use NAT64 of 93.184.215.14
        ("::a9fe:a9fe", "refused"),  # IPv4-compatible
        ("::7f00:1", "private"),  # IPv4-compatible 127.0.0.1
        ("::ffff:0:a9fe:a9fe", "refused"),  # IPv4-translated (RFC 2765)
        ("2002:a9fe:a9fe::1", "refused"),  # 6to4 of 169.254.169.254
        ("2002:a00:1::1", "private"),  # 6to4 of 10.0.0.1
        ("2002:5db8:d70e::1", "public"),  # 6to4 of 93.184.215.14
        ("2001:0:4136:e378:8000:63bf:5601:5601", "refused"),  # Teredo, client 169.254.169.254
        ("2001:0:4136:e378:8000:63bf:a247:28f1", "public"),  # Teredo, client 93.184.215.14
        ("0.0.0.0", "refused"),
        ("224.0.0.1", "refused"),
        ("127.0.0.1", "private"),
        ("::1", "private"),
        ("10.1.2.3", "private"),
        ("192.168.1.1", "private"),
        ("172.16.0.1", "private"),
        ("100.64.0.1", "private"),  # carrier-grade NAT
        ("fd12::1", "private"),
        ("::ffff:10.0.0.1", "private"),
        ("93.184.215.14", "public"),
        ("2606:4700::1", "public"),
    ],
)
def test_addresses_are_classified(address: str, kind_of: str) -> None:
    assert classify(ipaddress.ip_address(address)) == kind_of


def test_the_policy_allows_a_private_address_only_to_the_submitted_host() -> None:
    private = ipaddress.ip_address("10.0.0.5")
    EgressPolicy("submitted", "intranet.example").check("Intranet.Example.", private)
    EgressPolicy("all", None).check("other.example", private)
    for policy in (EgressPolicy("submitted", "intranet.example"), EgressPolicy("none", None)):
        with pytest.raises(EgressDenied, match=r"private address 10\.0\.0\.5"):
            policy.check("other.example", private)
    with pytest.raises(EgressDenied, match="link-local or metadata"):
        EgressPolicy("all", None).check("x", ipaddress.ip_address("169.254.169.254"))


# -- in the namespace ---------------------------------------------------------------------


async def test_a_redirect_from_a_public_host_into_a_private_one_is_refused(
    kind: str, net: TestNetwork, tmp_path: Path
) -> None:
    before = net.log("private")
    url = net.url("public", "/to?url=" + net.url("private", f"/page?{kind}"))
    outcome = await _fetch(kind, _settings(tmp_path), url)
    assert isinstance(outcome, EgressDenied), outcome
    assert outcome.error_type == "egress_denied"
    assert net.hosts["private"] in outcome.message
    assert f"/to?url={net.url('private', f'/page?{kind}')}" in net.log("public")
    assert net.log("private") == before  # no request reached it


async def test_a_submitted_private_url_is_fetched_unless_the_setting_says_none(
    kind: str, net: TestNetwork, tmp_path: Path
) -> None:
    url = net.url("private", f"/page?submitted-{kind}")
    page = await _fetch(kind, _settings(tmp_path), url)
    assert isinstance(page, FetchResponse), page
    assert f"served by {net.hosts['private']}" in page.text
    before = net.log("private")
    refused = await _fetch(kind, _settings(tmp_path, private_targets="none"), url)
    assert isinstance(refused, EgressDenied) and "none" in refused.message, refused
    assert net.log("private") == before
    # The "public" host is fetched under every setting.
    public = await _fetch(kind, _settings(tmp_path, private_targets="none"), net.url("public"))
    assert isinstance(public, FetchResponse), public


async def test_all_lets_a_redirect_reach_a_private_host(net: TestNetwork, tmp_path: Path) -> None:
    url = net.url("public", "/to?url=" + net.url("private", "/page?all"))
    page = await _fetch("http", _settings(tmp_path, private_targets="all"), url)
    assert isinstance(page, FetchResponse), page
    assert page.url == net.url("private", "/page?all")


async def test_link_local_addresses_are_refused_even_under_all(
    kind: str, net: TestNetwork, tmp_path: Path
) -> None:
    before = net.log("link_local")
    outcome = await _fetch(kind, _settings(tmp_path, private_targets="all"), net.url("link_local"))
    assert isinstance(outcome, EgressDenied) and "link-local" in outcome.message, outcome
    assert net.log("link_local") == before


@pytest.mark.parametrize("fetcher_kind", ["http", "impersonate"])
async def test_a_robots_txt_redirect_into_a_private_host_is_refused(
    db: Database, make_settings: SettingsFactory, net: TestNetwork, fetcher_kind: str
) -> None:
    settings = make_settings()
    await submit(db, settings, net.url("public", "/page"))
    async with db.session() as session:
        domain = await session.scalar(select(Domain))
        assert domain is not None
        domain.fetcher = fetcher_kind
        domain.base_url = net.url("public", "").rstrip("/")
        domain_id = domain.id
    before = net.log("private")
    refreshed, error = await refresh_robots_now(db, settings, domain_id)
    assert error is not None and "egress_denied" in error, error
    assert refreshed.robots_txt_content is None
    assert "/robots.txt" in net.log("public") and net.log("private") == before


# -- through a proxy (loopback: the proxy's own network is not ours to check) --------------


async def test_through_a_proxy_the_host_is_checked_before_it_is_handed_over(
    kind: str, tmp_path: Path
) -> None:
    with BombServer() as site, TestProxy() as proxy:
        none = _settings(tmp_path, private_targets="none")
        for url in (site.url("/ok"), site.url("/ok", host="localhost")):
            refused = await _fetch(kind, none, url, proxy.url)
            assert isinstance(refused, EgressDenied), (url, refused)
        assert proxy.requests == []  # refused before the proxy was asked
        submitted = _settings(tmp_path)
        page = await _fetch(kind, submitted, site.url("/ok"), proxy.url)
        assert isinstance(page, FetchResponse), page
        # The submitted host is 127.0.0.1; "localhost" is another (private) host.
        hop = site.url("/to?url=" + site.url("/ok", host="localhost"))
        redirected = await _fetch(kind, submitted, hop, proxy.url)
        assert isinstance(redirected, EgressDenied), redirected
        assert not [r for r in proxy.requests if r.startswith("http://localhost")]


# 0.0.0.0 reaches this host (so, unchecked, the loopback proxy would be asked); the others are
# never connected to, the check being made first.
@pytest.mark.parametrize("proxy_host", ["0.0.0.0", "169.254.169.254", "[fe80::1]", "[::a9fe:a9fe]"])
async def test_a_proxy_at_a_link_local_or_metadata_address_is_refused(
    kind: str, tmp_path: Path, proxy_host: str
) -> None:
    with BombServer() as site, TestProxy() as proxy:
        every = _settings(tmp_path, private_targets="all")
        via = f"http://{proxy_host}:{proxy.port}"
        refused = await _fetch(kind, every, site.url("/ok"), via)
        assert isinstance(refused, EgressDenied), refused
        assert "link-local or metadata" in str(refused), refused
        assert proxy.requests == []


# -- agents ----------------------------------------------------------------------------------


async def test_an_agent_applies_its_own_policy(net: TestNetwork) -> None:
    with pytest.raises(ValueError, match="private targets"):
        AgentClient("http://127.0.0.1:1", "t" * 40, private_targets="lan")
    agent = AgentClient("http://127.0.0.1:1", "t" * 40, private_targets="none")
    fetcher = HttpFetcher(
        agent._settings(
            max_body_bytes=1 << 20,
            fetch_timeout_seconds=10.0,
            connect_timeout_seconds=5.0,
            max_redirects=3,
        )
    )
    before = net.log("private")
    try:
        with pytest.raises(EgressDenied):
            await fetcher.fetch(FetchRequest(net.url("private", "/page?agent"), UA))
        page = await fetcher.fetch(FetchRequest(net.url("public", "/page?agent"), UA))
    finally:
        await fetcher.aclose()
    assert f"served by {net.hosts['public']}" in page.text
    assert net.log("private") == before
