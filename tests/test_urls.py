"""URL normalization: what makes two URLs the same task, and what is refused."""

from __future__ import annotations

import pytest

from forager.errors import InvalidURL
from forager.queue.urls import MAX_URL_LENGTH, normalize_url


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("HTTP://Example.COM/Path", "http://example.com/Path"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        ("https://example.com", "https://example.com/"),
        ("https://example.com/a#reviews", "https://example.com/a"),
        ("https://example.com/a?b=2&a=1", "https://example.com/a?a=1&b=2"),
        ("https://example.com/a?utm_source=x&id=3&UTM_medium=y", "https://example.com/a?id=3"),
        ("https://example.com/a?gclid=1&fbclid=2&x=1", "https://example.com/a?x=1"),
        ("https://example.com/a?&&x=1&", "https://example.com/a?x=1"),
        ("  https://example.com/a  ", "https://example.com/a"),
        ("https://bücher.de/x", "https://xn--bcher-kva.de/x"),
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize_url(raw).url == expected


def test_equivalent_urls_share_a_hash() -> None:
    a = normalize_url("https://WWW.Amazon.com.br:443/dp/B0?utm_source=x&th=1#top")
    b = normalize_url("https://www.amazon.com.br/dp/B0?th=1")
    assert a.url_hash == b.url_hash
    assert a.host == "www.amazon.com.br"
    assert a.base_url == "https://www.amazon.com.br"


def test_path_case_matters() -> None:
    assert normalize_url("https://e.com/A").url_hash != normalize_url("https://e.com/a").url_hash


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("example.com/a", "no scheme"),
        ("ftp://example.com/a", "'ftp' is not crawlable"),
        ("javascript:alert(1)", "not crawlable"),
        ("https:///path-only", "no host"),
        ("https://user:pw@example.com/", "credentials"),
        ("https://example.com/a b", "whitespace"),
        ("https://example.com:99999/", "cannot be parsed"),
        ("https://example.com/" + "a" * MAX_URL_LENGTH, "limit is 2048"),
    ],
)
def test_invalid_urls_are_refused_with_a_reason(raw: str, reason: str) -> None:
    with pytest.raises(InvalidURL, match=reason):
        normalize_url(raw)
