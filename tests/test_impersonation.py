"""Issue 33: impersonation proven, not assumed. A loopback TLS listener records the ClientHello
and the HTTP/2 SETTINGS each fetcher sends: ``impersonate`` presents Chrome's (GREASE values,
HTTP/2 offered, Chrome's extensions and SETTINGS), ``http`` a plain client's hello, and the two
differ in what JA3 counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from forager.errors import FetchError
from forager.fetch.base import FetchRequest
from forager.fetch.fetcher_set import build_fetcher
from tests.support.fetching import fetch_settings
from tests.support.socks import make_certificates
from tests.support.tlshello import ClientHello, HelloRecorder

# Extensions Chrome sends and libcurl on its own does not: compress_certificate (RFC 8879),
# application_settings (ALPS, old and new code points).
CHROME_ONLY = {27, 17513, 17613}
# Chrome's SETTINGS: HEADER_TABLE_SIZE 65536, ENABLE_PUSH 0, INITIAL_WINDOW_SIZE 6 MiB,
# MAX_HEADER_LIST_SIZE 256 KiB, in this order (what HTTP/2 fingerprints read).
CHROME_SETTINGS = {1: 65536, 2: 0, 4: 6291456, 6: 262144}


async def _hello(kind: str, tmp_path: Path) -> ClientHello:
    fetcher = build_fetcher(kind, fetch_settings(tmp_path, fetch_timeout_seconds=5.0))
    try:
        async with HelloRecorder() as server:
            url = f"https://127.0.0.1:{server.port}/product/1"
            with pytest.raises(FetchError):  # the listener hangs up after the hello
                await fetcher.fetch(FetchRequest(url, "forager-test/1", fetcher=kind))
    finally:
        await fetcher.aclose()
    assert server.hellos, f"{kind} sent no ClientHello"
    return server.hellos[0]


async def test_impersonate_presents_chromes_fingerprint_and_http_does_not(
    tmp_path: Path,
) -> None:
    chrome = await _hello("impersonate", tmp_path)
    plain = await _hello("http", tmp_path)
    assert chrome.grease, "Chrome scatters GREASE values through its lists"
    assert not plain.grease
    assert CHROME_ONLY & set(chrome.extensions)
    assert not CHROME_ONLY & set(plain.extensions)
    assert chrome.alpn[:2] == ("h2", "http/1.1")
    assert chrome.ja3_parts != plain.ja3_parts


async def test_impersonate_sends_chromes_http2_settings(tmp_path: Path) -> None:
    """Only ``impersonate`` is checked: curl_cffi's libcurl sends these SETTINGS for ``http``
    too, so HTTP/2 SETTINGS alone do not tell the two apart (the ClientHello does)."""
    ca_file, cert_file, key_file = make_certificates(tmp_path)
    settings = fetch_settings(tmp_path, fetch_timeout_seconds=5.0, ca_bundle_file=ca_file)
    fetcher = build_fetcher("impersonate", settings)
    try:
        async with HelloRecorder(cert_file, key_file) as server:
            url = f"https://127.0.0.1:{server.port}/product/1"
            with pytest.raises(FetchError):  # the listener hangs up after the SETTINGS
                await fetcher.fetch(FetchRequest(url, "forager-test/1", fetcher="impersonate"))
    finally:
        await fetcher.aclose()
    assert server.hellos[0].grease  # the same connection's hello was Chrome's
    assert server.settings == [CHROME_SETTINGS]
    assert list(server.settings[0]) == [1, 2, 4, 6]
