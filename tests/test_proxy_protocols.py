"""http, https and socks5 proxies with authentication, through real loopback proxy servers
(SOCKS5, HTTP CONNECT to an HTTPS site, TLS to the proxy itself), on SQLite and PostgreSQL."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, update

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import CrawlAttempt, Domain, DomainProxy, Proxy
from tests.conftest import SettingsFactory
from tests.support.crawling import crawl, submit, tasks_by_id
from tests.support.proxy import TestProxy
from tests.support.site import TestSite
from tests.support.socks import TestSocksProxy, TlsFront, make_certificates

PASSWORD = "s0cks:p@ss/word"


@pytest.fixture
def certificates(tmp_path: Path) -> tuple[Path, Path, Path]:
    return make_certificates(tmp_path)


@pytest.fixture
def https_site(site: TestSite, certificates: tuple[Path, Path, Path]) -> Iterator[TlsFront]:
    """The test site behind TLS: https://127.0.0.1:<front.port>/…"""
    _, cert, key = certificates
    with TlsFront(site.port, cert, key) as front:
        yield front


def _unused_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _crawl_via(
    db: Database,
    settings: Settings,
    url: str,
    *,
    protocol: str,
    port: int,
    username: str | None,
    password: str | None,
) -> tuple[str, str | None, int]:
    """Crawl ``url`` through one mapped proxy; (status, error_type, proxy id of the task)."""
    [task_id] = await submit(db, settings, url)
    domain_id = (await tasks_by_id(db, [task_id]))[task_id].domain_id
    box = SecretBox(settings)
    async with db.session() as session:
        proxy = Proxy(
            proxy_url="127.0.0.1",
            proxy_port=port,
            proxy_protocol=protocol,
            proxy_username=username,
            proxy_password=box.encrypt(password) if password else None,
        )
        session.add(proxy)
        await session.flush()
        session.add(DomainProxy(domain_id=domain_id, proxy_id=proxy.id))
        proxy_id = proxy.id
    task = (await crawl(db, settings, [task_id]))[task_id]
    assert task.proxy_id in (None, proxy_id)
    return task.status, task.error_type, proxy_id


async def test_socks5_proxy_with_auth(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_retries=0)
    # The site is reachable only through the proxy: at a port nothing listens on directly.
    hidden = _unused_port()
    with TestSocksProxy(username="crawler", password=PASSWORD, ports={hidden: site.port}) as socks:
        status, error, proxy_id = await _crawl_via(
            db,
            settings,
            f"http://127.0.0.1:{hidden}/product/11",
            protocol="socks5",
            port=socks.port,
            username="crawler",
            password=PASSWORD,
        )
        assert (status, error) == ("completed", None)
        # robots.txt, then the page: both through the domain's proxy (one tunnel may carry
        # both: robots.txt goes through the worker's own fetchers), never direct.
        assert socks.requests and set(socks.requests) == {f"127.0.0.1:{hidden}"}
        assert socks.rejected == 0
    async with db.reader() as session:
        proxy = await session.scalar(select(Proxy).where(Proxy.id == proxy_id))
    assert proxy is not None and (proxy.success_count, proxy.failure_count) == (1, 0)
    assert [r.path for r in site.requests()][-2:] == ["/robots.txt", "/product/11"]
    # (A wrong SOCKS password is not exercised here: httpcore 1.x leaks the client socket
    # when the SOCKS handshake fails, which pytest reports as an unraisable ResourceWarning.)


async def test_http_proxy_with_auth_tunnels_to_an_https_site(
    db: Database,
    make_settings: SettingsFactory,
    site: TestSite,
    https_site: TlsFront,
    certificates: tuple[Path, Path, Path],
) -> None:
    settings = make_settings(max_retries=0, ca_bundle_file=certificates[0])
    url = f"https://127.0.0.1:{https_site.port}/product/13"
    with TestProxy(username="tunnel", password=PASSWORD) as proxy:
        status, error, _ = await _crawl_via(
            db,
            settings,
            url,
            protocol="http",
            port=proxy.port,
            username="tunnel",
            password=PASSWORD,
        )
    assert (status, error) == ("completed", None)
    # robots.txt, then the page, through CONNECT tunnels of the domain's proxy (one may carry
    # both: robots.txt goes through the worker's own fetchers), and no connection but those.
    assert proxy.requests and set(proxy.requests) == {f"127.0.0.1:{https_site.port}"}
    assert https_site.connections == len(proxy.requests)
    assert "/product/13" in [r.path for r in site.requests()]


async def test_https_proxy_with_auth(
    db: Database,
    make_settings: SettingsFactory,
    site: TestSite,
    certificates: tuple[Path, Path, Path],
) -> None:
    settings = make_settings(max_retries=0, ca_bundle_file=certificates[0])
    _, cert, key = certificates
    with (
        TestProxy(username="secure", password=PASSWORD) as proxy,
        TlsFront(proxy.port, cert, key) as tls_proxy,
    ):
        status, error, _ = await _crawl_via(
            db,
            settings,
            site.url("/product/14", host="127.0.0.3"),
            protocol="https",
            port=tls_proxy.port,
            username="secure",
            password=PASSWORD,
        )
    assert (status, error) == ("completed", None)
    assert tls_proxy.connections >= 1  # TLS to the proxy …
    # … then forwarded: robots.txt first, then the page.
    assert proxy.requests == [
        site.url("/robots.txt", host="127.0.0.3"),
        site.url("/product/14", host="127.0.0.3"),
    ]


async def test_connection_reset_through_a_proxy_rotates_and_counts_for_the_domain(
    db: Database, make_settings: SettingsFactory, site: TestSite
) -> None:
    settings = make_settings(max_retries=2)
    [task_id] = await submit(db, settings, site.url("/product/15", host="127.0.0.4"))
    domain_id = (await tasks_by_id(db, [task_id]))[task_id].domain_id
    async with db.session() as session:  # the page fetches are what this test is about
        await session.execute(
            update(Domain).where(Domain.id == domain_id).values(ignore_robots=True)
        )
    with TestSocksProxy(reset=True) as dropping, TestSocksProxy() as fine:
        ids = []
        async with db.session() as session:
            for server in (dropping, fine):
                proxy = Proxy(
                    proxy_url="127.0.0.1", proxy_port=server.port, proxy_protocol="socks5"
                )
                session.add(proxy)
                await session.flush()
                session.add(DomainProxy(domain_id=domain_id, proxy_id=proxy.id))
                ids.append(proxy.id)
        task = (await crawl(db, settings, [task_id], concurrency=1))[task_id]
    assert (task.status, task.proxy_id) == ("completed", ids[1])
    assert dropping.requests and fine.requests
    async with db.reader() as session:
        mapping = await session.scalar(select(DomainProxy).where(DomainProxy.proxy_id == ids[0]))
        proxy = await session.scalar(select(Proxy).where(Proxy.id == ids[0]))
    assert mapping is not None and mapping.failure_count == 1  # for this domain …
    async with db.reader() as session:
        msgs = list(await session.scalars(select(CrawlAttempt.error_message)))
    assert proxy is not None and proxy.failure_count == 0, msgs  # … not everywhere
