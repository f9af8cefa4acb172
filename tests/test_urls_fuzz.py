"""Property-based fuzzing of URL normalization (hypothesis): the dedup key must be stable."""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from forager.errors import InvalidURL
from forager.queue.urls import MAX_URL_LENGTH, NormalizedURL, normalize_url

FUZZ = settings(max_examples=200, deadline=None, database=None)

_LABEL = st.text(alphabet=st.sampled_from("abcXYZ019-_ü.é"), min_size=0, max_size=12)
_HOST = st.one_of(
    st.lists(_LABEL, min_size=1, max_size=4).map(".".join),
    st.sampled_from(["[::1]", "[2001:DB8::1]", "127.0.0.1", "EXAMPLE.com", "xn--bcher-kva.de"]),
)
_PATH_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="#?"), max_size=20
)
_QUERY_KEY = st.sampled_from(["a", "B", "utm_source", "UTM_Medium", "gclid", "fbclid", "id", ""])


@st.composite
def _urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "HtTpS", "ftp", "", "javascript"]))
    host = draw(_HOST)
    port = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=70000)))
    userinfo = draw(st.sampled_from(["", "", "", "user@", "u:p@"]))
    path = draw(st.lists(_PATH_TEXT, max_size=3).map(lambda parts: "/" + "/".join(parts)))
    pairs = draw(st.lists(st.tuples(_QUERY_KEY, _PATH_TEXT), max_size=4))
    query = "&".join(f"{k}={v}" if v else k for k, v in pairs)
    fragment = draw(st.one_of(st.none(), _PATH_TEXT))
    url = f"{scheme}://{userinfo}{host}" if scheme else f"{userinfo}{host}"
    url += f":{port}" if port is not None else ""
    url += path + (f"?{query}" if query or draw(st.booleans()) else "")
    return url + (f"#{fragment}" if fragment is not None else "")


_RAW = st.one_of(_urls(), st.text(max_size=80))


def _normalized(raw: str) -> NormalizedURL | None:
    try:
        return normalize_url(raw)
    except InvalidURL:
        return None


@FUZZ
@given(raw=_RAW)
def test_normalize_is_idempotent(raw: str) -> None:
    first = _normalized(raw)
    if first is None:
        return
    again = normalize_url(first.url)
    assert again == first


@FUZZ
@given(raw=_RAW)
def test_normalized_urls_keep_the_rules(raw: str) -> None:
    found = _normalized(raw)
    if found is None:
        return
    parts = urlsplit(found.url)
    assert parts.scheme in {"http", "https"}
    assert found.host == found.host.lower()
    assert found.host.isascii()
    assert found.base_url == found.base_url.lower()
    assert found.url.startswith(found.base_url + "/")
    assert not parts.fragment and "#" not in found.url
    assert parts.username is None and parts.password is None
    pairs = parts.query.split("&") if parts.query else []
    assert pairs == sorted(pairs)
    assert "" not in pairs
    assert not any(p.lower().startswith("utm_") for p in pairs)
    assert not any(p.split("=", 1)[0].lower() in {"gclid", "fbclid"} for p in pairs)
    assert len(found.url) <= MAX_URL_LENGTH
    assert found.url_hash == hashlib.sha256(found.url.encode()).hexdigest()


@FUZZ
@given(raw=_urls(), case=st.booleans())
def test_scheme_and_host_case_do_not_change_the_key(raw: str, case: bool) -> None:
    found = _normalized(raw)
    if found is None:
        return
    scheme, rest = raw.split("://", 1)
    host_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    host = rest[:host_end]
    changed = (scheme.upper() if case else scheme.lower()) + "://"
    changed += (host.upper() if case else host.lower()) + rest[host_end:]
    assert _normalized(changed) == found
