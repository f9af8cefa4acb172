"""Tests of the test site and test proxy themselves (tests/support)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.proxy import TestProxy
from tests.support.site import TestSite
from tests.support.waiting import eventually

HOSTS = ["127.0.0.1", "127.0.0.2"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def running_site() -> Iterator[TestSite]:
    with TestSite(hosts=HOSTS) as site:
        yield site


@pytest.fixture
def site(running_site: TestSite) -> TestSite:
    running_site.reset()
    return running_site


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10, trust_env=False) as client:
        yield client


def json_ld(html: str) -> list[dict[str, Any]]:
    blocks = re.findall(r'<script type="application/ld\+json">(.*?)</script>', html, re.S)
    return [json.loads(block) for block in blocks]


# ----------------------------------------------------------------------------- site


def test_product_page_has_json_ld_and_decoy(site: TestSite, client: httpx.Client) -> None:
    response = client.get(site.url("/product/5", host="127.0.0.2"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    main, decoy = json_ld(response.text)
    assert main["name"] == "Test Product 5"
    assert main["sku"] == "SKU-5"
    assert main["brand"]["name"] == "Brand 5"
    assert main["offers"]["price"] == "5.99"
    assert main["offers"]["priceCurrency"] == "USD"
    assert main["offers"]["availability"] == "https://schema.org/InStock"
    assert main["aggregateRating"] == {
        "@type": "AggregateRating",
        "ratingValue": "4.5",
        "reviewCount": 5,
    }
    base = f"http://127.0.0.2:{site.port}"
    assert main["image"] == [f"{base}/img/5-1.jpg", f"{base}/img/5-2.jpg"]
    assert "<h1" in response.text
    assert ">Test Product 5</h1>" in response.text
    assert "$5.99" in response.text
    assert "Related products" in response.text
    assert decoy["@type"] == "Product"
    assert decoy["name"] != main["name"]
    assert decoy["offers"]["price"] != main["offers"]["price"]
    assert 30_000 <= len(response.content) <= 60_000


def test_filler_size_is_configurable(site: TestSite, client: httpx.Client) -> None:
    small = client.get(site.url("/product/5?kb=0")).content
    large = client.get(site.url("/product/5?kb=200")).content
    assert len(small) < 5_000
    assert 200_000 <= len(large) <= 210_000
    assert client.get(site.url("/product/5?kb=x")).status_code == 400


def test_price_state_changes_and_resets(site: TestSite, client: httpx.Client) -> None:
    answer = client.post(site.url("/__price/7"), json={"price": "12.50", "available": False})
    assert answer.status_code == 200
    main = json_ld(client.get(site.url("/product/7")).text)[0]
    assert main["offers"]["price"] == "12.50"
    assert main["offers"]["availability"] == "https://schema.org/OutOfStock"
    site.set_price(7, "3.10")
    assert json_ld(client.get(site.url("/product/7")).text)[0]["offers"]["price"] == "3.10"
    assert client.post(site.url("/__reset")).status_code == 200
    assert json_ld(client.get(site.url("/product/7")).text)[0]["offers"]["price"] == "7.99"
    assert client.post(site.url("/__price/7"), json={"price": "abc"}).status_code == 400


def test_log_records_host_path_times_and_status(site: TestSite, client: httpx.Client) -> None:
    before = time.time()
    client.get(site.url("/product/1?kb=1", host="127.0.0.2"))
    client.get(site.url("/status/404"))
    after = time.time()
    log = client.get(site.url("/__log")).json()
    assert log == site.log()
    first, second = log["requests"]  # the /__log call itself is not logged
    assert first["host"] == "127.0.0.2"
    assert first["path"] == "/product/1?kb=1"
    assert first["status"] == 200
    assert before <= first["start"] <= first["end"] <= second["start"] <= second["end"] <= after
    client.get(site.url("/img/x"))
    assert site.log()["requests"][-1]["path"] == "/img/x"  # logged before the client has it
    assert (second["host"], second["status"]) == ("127.0.0.1", 404)
    assert [r.path for r in site.requests(host="127.0.0.2")] == ["/product/1?kb=1"]
    site.reset()
    assert site.log() == {"requests": [], "max_concurrency": {}, "held": {}}


async def test_held_requests_wait_for_release_and_count_as_concurrent(site: TestSite) -> None:
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        urls = [site.url("/hold/abc")] * 3 + [site.url("/hold/abc", host="127.0.0.2")]
        answers = asyncio.gather(*(client.get(url) for url in urls))

        await eventually(lambda: site.held("abc") == 4, "four held requests")
        assert site.log()["held"] == {"abc": 4} and site.requests() == []  # none answered
        assert (await client.post(site.url("/__release/abc"))).status_code == 200
        responses = await answers
        assert [r.status_code for r in responses] == [200] * 4
        assert json_ld(responses[0].text)[0]["name"] == "Test Product 3"
        assert site.log()["max_concurrency"] == {"127.0.0.1": 3, "127.0.0.2": 1}
        assert (await client.get(site.url("/hold/abc"))).status_code == 200  # released for good

        # A reset lets go of what the previous test still held, and forgets releases.
        site.reset()
        held = asyncio.ensure_future(client.get(site.url("/hold/abc")))
        await eventually(lambda: site.held("abc") == 1, "a held request")
        site.reset()
        assert (await held).status_code == 200
    assert site.held("abc") == 0


def test_slow_waits_at_least_its_milliseconds(site: TestSite, client: httpx.Client) -> None:
    assert json_ld(client.get(site.url("/slow/300")).text)[0]["name"] == "Test Product 300"
    [record] = site.requests()
    assert record.end - record.start >= 0.29  # a lower bound: a sleep is never shorter


def test_two_hosts_share_one_port(site: TestSite, client: httpx.Client) -> None:
    assert site.url("/x", host="127.0.0.2") == f"http://127.0.0.2:{site.port}/x"
    for host in HOSTS:
        assert client.get(site.url("/product/2", host=host)).status_code == 200
    # never bound on the wildcard address: other loopback IPs are not served
    with pytest.raises(httpx.ConnectError):
        client.get(site.url("/product/2", host="127.0.0.3"))


def test_big_streams_chunked(site: TestSite, client: httpx.Client) -> None:
    with client.stream("GET", site.url("/big?mb=3")) as response:
        assert "content-length" not in response.headers
        assert response.headers["transfer-encoding"] == "chunked"
        size = sum(len(chunk) for chunk in response.iter_raw())
    assert size == 3 * 1024 * 1024
    with client.stream("GET", site.url("/big-declared?mb=2")) as response:
        assert response.headers["content-length"] == str(2 * 1024 * 1024)
        assert sum(len(chunk) for chunk in response.iter_raw()) == 2 * 1024 * 1024


def test_gzip_bomb_is_small_on_the_wire(site: TestSite, client: httpx.Client) -> None:
    with client.stream("GET", site.url("/gzip-bomb?mb=20")) as response:
        assert response.headers["content-encoding"] == "gzip"
        raw = b"".join(response.iter_raw())
    assert len(raw) < 50_000
    inflater = zlib.decompressobj(31)
    size = 0
    chunk = inflater.decompress(raw, 1 << 20)
    while chunk:
        size += len(chunk)
        chunk = inflater.decompress(inflater.unconsumed_tail, 1 << 20)
    assert size == 20 * 1024 * 1024


def test_redirect_chain_and_loop(site: TestSite, client: httpx.Client) -> None:
    first = client.get(site.url("/redirect/3"))
    assert first.status_code == 302
    assert first.headers["location"] == "/redirect/2"
    final = client.get(site.url("/redirect/3"), follow_redirects=True)
    assert final.status_code == 200
    assert final.url.path == "/product/1"
    assert [r.url.path for r in final.history] == [f"/redirect/{n}" for n in (3, 2, 1, 0)]
    with pytest.raises(httpx.TooManyRedirects):
        client.get(site.url("/redirect-loop"), follow_redirects=True)


def test_flaky_fails_then_recovers(site: TestSite, client: httpx.Client) -> None:
    url = site.url("/flaky/abcd?fail=2&code=503")
    first, second, third = (client.get(url) for _ in range(3))
    assert (first.status_code, second.status_code, third.status_code) == (503, 503, 200)
    assert first.headers["retry-after"] == "1"
    assert json_ld(third.text)[0]["name"] == "Test Product 4"
    site.reset()
    assert client.get(url).status_code == 503


@pytest.mark.parametrize(("code", "retry_after"), [(404, None), (429, "1"), (503, "1")])
def test_status(site: TestSite, client: httpx.Client, code: int, retry_after: str | None) -> None:
    response = client.get(site.url(f"/status/{code}"))
    assert response.status_code == code
    assert response.headers.get("retry-after") == retry_after
    assert str(code) in response.text


def test_amazon_pages(site: TestSite, client: httpx.Client) -> None:
    us = client.get(site.url("/amazon/dp/B0ABC12345")).text
    assert '<span id="productTitle">  Widget Pro 3000  </span>' in us
    assert '<span class="a-offscreen">$1,299.90</span>' in us
    assert '<input type="hidden" id="ASIN" value="B0ABC12345">' in us
    assert '"https://m.media-amazon.com/images/I/71abcDEF01L._AC_SX300_.jpg":[300,300]' in us
    assert len(us) > 30_000
    br = client.get(site.url("/amazon-br/dp/B0ABC12345?kb=0")).text
    for text in ("R$ 1.299,90", "R$ 1.499,00", "4,5 de 5 estrelas", "1.234 avaliações"):
        assert text in br
    assert "Em estoque" in br
    assert "Visite a loja da Acme" in br
    assert len(br) < 3_000


def test_other_pages(site: TestSite, client: httpx.Client) -> None:
    captcha = client.get(site.url("/captcha"))
    assert captcha.status_code == 200
    assert "Enter the characters you see below" in captcha.text
    assert 'action="/errors/validateCaptcha"' in captcha.text
    article = client.get(site.url("/notproduct")).text
    assert '"Product"' not in article
    js = client.get(site.url("/js-price/5")).text
    assert "5.99" not in js
    assert "599" in js
    image = client.get(site.url("/img/5-1.jpg"))
    assert image.headers["content-type"] == "image/jpeg"
    assert image.content.startswith(b"\xff\xd8")
    echoed = client.get(site.url("/echo-headers"), headers={"User-Agent": "forager-test/1"})
    assert echoed.json()["user-agent"] == "forager-test/1"


def test_robots_is_configurable(site: TestSite, client: httpx.Client) -> None:
    assert client.get(site.url("/robots.txt")).text == "User-agent: *\nDisallow: /private/\n"
    client.post(site.url("/__robots"), content="User-agent: *\nDisallow: /\n")
    assert client.get(site.url("/robots.txt")).text == "User-agent: *\nDisallow: /\n"
    site.reset()
    assert "Disallow: /private/" in client.get(site.url("/robots.txt")).text


async def test_stops_promptly_and_quietly_with_requests_in_flight(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with TestSite() as site, httpx.Client(trust_env=False) as client:
        with client.stream("GET", site.url("/big?mb=50")) as response:
            next(response.iter_raw())  # then hang up mid-body
        with socket.create_connection(("127.0.0.1", site.port), timeout=30) as sock:
            sock.sendall(b"GET /hold/forever HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await eventually(lambda: site.held("forever") == 1, "the held request")
            server = site._thread
            site.stop()
            # The server thread ended (stop did not give up waiting for it), and the held
            # request was answered by its handler, not cut off by uvicorn's shutdown timeout.
            assert server is not None and not server.is_alive()
            assert sock.recv(100).startswith(b"HTTP/1.1 200")
    assert [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")] == []


@pytest.mark.slow
async def test_standalone_process(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    command = [sys.executable, "-m", "tests.support.site", "--hosts", "127.0.0.1,127.0.0.2"]
    process = subprocess.Popen(
        [*command, "--port", "0", "--port-file", str(port_file)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:

        def port_written() -> bool:
            assert process.poll() is None, process.communicate()
            return port_file.exists()

        await eventually(port_written, "the port file")
        port = int(port_file.read_text())
        response = httpx.get(f"http://127.0.0.2:{port}/product/9", timeout=10, trust_env=False)
        assert response.status_code == 200
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert (stdout, stderr) == (b"", b"")


# ----------------------------------------------------------------------------- proxy


def test_proxy_forwards_and_records(site: TestSite) -> None:
    with TestProxy() as proxy:
        assert proxy.url == f"http://127.0.0.1:{proxy.port}"
        url = site.url("/product/3", host="127.0.0.2")
        response = httpx.get(url, proxy=proxy.url)
        assert response.status_code == 200
        assert json_ld(response.text)[0]["name"] == "Test Product 3"
        with httpx.Client(proxy=proxy.url) as client:
            posted = client.post(site.url("/__price/3"), json={"price": "1.00"})
            assert posted.status_code == 200
            assert json_ld(client.get(url).text)[0]["offers"]["price"] == "1.00"
        assert proxy.requests == [url, site.url("/__price/3"), url]
        assert proxy.count == 3
    assert site.requests(host="127.0.0.2")[0].path == "/product/3"


def test_proxy_auth(site: TestSite) -> None:
    with TestProxy(username="user", password="p@ss") as proxy:
        assert proxy.url == f"http://user:p%40ss@127.0.0.1:{proxy.port}"
        url = site.url("/product/1")
        bare = httpx.get(url, proxy=f"http://127.0.0.1:{proxy.port}")
        assert bare.status_code == 407
        assert bare.headers["proxy-authenticate"].startswith("Basic")
        wrong = httpx.get(url, proxy=f"http://user:nope@127.0.0.1:{proxy.port}")
        assert wrong.status_code == 407
        assert httpx.get(url, proxy=proxy.url).status_code == 200
        assert proxy.requests == [url]
        assert proxy.rejected == 2


def test_proxy_connect_tunnel(site: TestSite) -> None:
    with TestProxy(username="u", password="p") as proxy:
        credentials = base64.b64encode(b"u:p").decode()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            target = f"127.0.0.2:{site.port}"
            sock.sendall(
                f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
                f"Proxy-Authorization: Basic {credentials}\r\n\r\n".encode()
            )
            assert sock.recv(1024).startswith(b"HTTP/1.1 200")
            sock.sendall(b"GET /img/a.jpg HTTP/1.1\r\nHost: 127.0.0.2\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        assert data.startswith(b"HTTP/1.1 200")
        assert data.endswith(b"\xff\xd9")
        assert proxy.requests == [target]


def test_proxy_refuses_non_loopback_and_fails_on_demand(site: TestSite) -> None:
    with TestProxy() as proxy:
        assert httpx.get("http://192.0.2.1/", proxy=proxy.url).status_code == 403
        proxy.fail = True
        with pytest.raises(httpx.TransportError):
            httpx.get(site.url("/product/1"), proxy=proxy.url)
        proxy.fail = False
        assert httpx.get(site.url("/product/1"), proxy=proxy.url).status_code == 200
        assert proxy.requests == [site.url("/product/1")]
        assert proxy.rejected == 2
