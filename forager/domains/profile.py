"""Request profiles (issue 33): the headers, cookies and user agent a domain's fetches carry, so a
page is fetched the way a shopper sees it (locale, delivery ZIP code, store).

A profile is checked here (``check_header`` / ``check_cookie``: no CR/LF/NUL, bounded sizes, no
hop-by-hop or connection-level header), stored as JSON with every secret value sealed by the
``SecretBox`` (``seal``), shown without secret values (``public``), and opened only in memory just
before a fetch (``open_profile``). A crawl job's profile overrides its domain's name by name,
and a task's own profile both.

Stored shape::

    {"user_agent": "...",                      # optional (a task's override)
     "headers": [{"name": "Accept-Language", "value": "de-DE"},
                 {"name": "Authorization", "secret": true, "sealed": "<Fernet token>"}],
     "cookies": [{"name": "locale", "value": "de-DE"}, ...]}
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from forager.crypto import SecretBox
from forager.errors import InvalidRequest

# Bounds that keep a task message to an agent (a domain's and a task's profile, and the body)
# within the protocol's 256 KiB: ~85 KiB a profile, 32 KiB of body.
MAX_ENTRIES = 20  # headers, and cookies, per profile
MAX_BODY = 32 * 1024  # a task's request body, encoded
MAX_NAME = 100
MAX_VALUE = 2048
# RFC 9110 token characters: a header or cookie name.
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_INJECTION = re.compile(r"[\r\n\x00]")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # tab is allowed inside a header value
# A cookie value: RFC 6265 cookie-octets (no whitespace, comma, semicolon, quote, backslash).
_COOKIE_VALUE = re.compile(r"^[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*$")
# Hop-by-hop and connection-level headers are the client's to set, never the operator's;
# Cookie and User-Agent have fields of their own.
FORBIDDEN = frozenset(
    {
        "host",
        "connection",
        "content-length",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "keep-alive",
        "expect",
    }
)
_OWN_FIELD = {"cookie": "cookies", "user-agent": "user_agent"}
# Always secret, whatever the operator says.
SECRET_HEADERS = frozenset({"authorization", "x-api-key", "x-auth-token"})


def check_name(name: str) -> str:
    """A header or cookie name: a token of at most ``MAX_NAME`` characters."""
    if _INJECTION.search(name):
        raise ValueError("must not contain CR, LF or NUL (header injection)")
    if not name or len(name) > MAX_NAME:
        raise ValueError(f"must be 1 to {MAX_NAME} characters")
    if not _TOKEN.match(name):
        raise ValueError("must be a token (letters, digits and !#$%&'*+.^_`|~-)")
    return name


def check_header_name(name: str) -> str:
    """``check_name`` plus no forbidden header (hop-by-hop, connection-level, own fields)."""
    name = check_name(name)
    lowered = name.lower()
    if lowered in FORBIDDEN or lowered.startswith("proxy-"):
        raise ValueError(f"{name} is a hop-by-hop or connection-level header: the client sets it")
    if lowered in _OWN_FIELD:
        raise ValueError(f"{name} is set through the profile's {_OWN_FIELD[lowered]!r} field")
    return name


def check_header_value(value: str) -> str:
    if _INJECTION.search(value):
        raise ValueError("must not contain CR, LF or NUL (header injection)")
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    if len(value) > MAX_VALUE:
        raise ValueError(f"must be at most {MAX_VALUE} characters")
    return value


def check_cookie_value(value: str) -> str:
    value = check_header_value(value)
    if not _COOKIE_VALUE.match(value):
        raise ValueError("must be cookie octets (no spaces, commas, semicolons, quotes)")
    return value


def check_user_agent(value: str) -> str:
    value = check_header_value(value)
    if not value.strip() or len(value) > 255:
        raise ValueError("must be 1 to 255 characters")
    return value


def unique(entries: Sequence[Any], kind: str) -> None:
    """Refuse a name given twice (case-insensitively for headers)."""
    seen: set[str] = set()
    for entry in entries:
        key = entry.name.lower() if kind == "headers" else entry.name
        if key in seen:
            raise ValueError(f"{kind}: {entry.name} is given twice")
        seen.add(key)


def is_secret(kind: str, name: str, marked: bool) -> bool:
    return marked or (kind == "headers" and name.lower() in SECRET_HEADERS)


def seal(
    given: Mapping[str, Any], box: SecretBox, stored: Mapping[str, Any] | None, where: str
) -> dict[str, Any]:
    """The stored form of a checked profile ``given`` (``{"headers": [{name, value, secret}],
    …}``): secret values encrypted. A secret entry sent without a value keeps the one stored
    under its name in ``stored``; ``InvalidRequest`` naming the field when there is none."""
    sealed: dict[str, Any] = {}
    if given.get("user_agent"):
        sealed["user_agent"] = given["user_agent"]
    for kind in ("headers", "cookies"):
        before = {e["name"].lower(): e for e in (stored or {}).get(kind, [])}
        entries = []
        for i, entry in enumerate(given.get(kind) or []):
            name, value = entry["name"], entry.get("value")
            secret = is_secret(kind, name, bool(entry.get("secret")))
            if value is None:
                kept = before.get(name.lower())
                if not secret or kept is None or "sealed" not in kept:
                    raise InvalidRequest(
                        f"{name}: a value is required (only a stored secret may be kept by "
                        "leaving its value out)",
                        field=f"{where}.{kind}.{i}.value",
                    )
                entries.append({"name": name, "secret": True, "sealed": kept["sealed"]})
            elif secret:
                entries.append({"name": name, "secret": True, "sealed": box.encrypt(value)})
            else:
                entries.append({"name": name, "value": value})
        if entries:
            sealed[kind] = entries
    return sealed


def public(stored: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the API shows of a stored profile: secret entries as ``secret: true`` and no value."""
    if not stored:
        return None
    shown: dict[str, Any] = {"user_agent": stored.get("user_agent")}
    for kind in ("headers", "cookies"):
        shown[kind] = [
            {
                "name": e["name"],
                "value": None if e.get("secret") else e.get("value"),
                "secret": bool(e.get("secret")),
            }
            for e in stored.get(kind, [])
        ]
    return shown


@dataclass(frozen=True, slots=True)
class OpenProfile:
    """A profile in clear, in memory only, for one fetch."""

    user_agent: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    cookies: dict[str, str] = field(default_factory=dict, repr=False)


def _entries(stored: Mapping[str, Any] | None, kind: str, box: SecretBox | None) -> dict[str, str]:
    opened = {}
    for entry in (stored or {}).get(kind, []):
        if "sealed" in entry:
            if box is None:
                raise InvalidRequest("a secret profile value needs the secret box", field=kind)
            opened[entry["name"]] = box.decrypt(entry["sealed"])
        else:
            opened[entry["name"]] = entry["value"]
    return opened


def open_profile(
    domain: Mapping[str, Any] | None,
    task: Mapping[str, Any] | None,
    box: SecretBox | None,
    job: Mapping[str, Any] | None = None,
) -> OpenProfile:
    """The domain's profile with its crawl job's over it and the task's over both (a header by
    name, case-insensitively; a cookie by name), secrets decrypted."""
    headers: dict[str, str] = {}
    cookies: dict[str, str] = {}
    user_agent = None
    for layer in (domain, job, task):
        for name, value in _entries(layer, "headers", box).items():
            for old in [h for h in headers if h.lower() == name.lower()]:
                del headers[old]
            headers[name] = value
        cookies |= _entries(layer, "cookies", box)
        user_agent = (layer or {}).get("user_agent") or user_agent
    return OpenProfile(user_agent, headers, cookies)


def seal_request(given: Mapping[str, Any], box: SecretBox) -> dict[str, Any] | None:
    """The stored form of a task's request (``crawl_tasks.fetch_request``): method, body and its
    type, the task's own profile sealed, and ``key``, the identity its url_hash includes (method,
    body and the profile without secret values). None for a bare GET with no profile of its own.
    """
    body, body_type, field_name = None, None, "request.method"
    if given.get("json_body") is not None:
        field_name = "request.json_body"
        body = json.dumps(given["json_body"], separators=(",", ":"), ensure_ascii=False)
        body_type = "application/json"
    elif given.get("form") is not None:
        field_name = "request.form"
        body, body_type = urlencode(given["form"]), "application/x-www-form-urlencoded"
    method = given.get("method") or ("GET" if body is None else "POST")
    if method == "GET" and body is not None:
        raise InvalidRequest("a body is sent with method POST only", field="request.method")
    if body is not None and len(body.encode()) > MAX_BODY:
        raise InvalidRequest(f"the body is over {MAX_BODY} bytes", field=field_name)
    sealed = seal(given, box, None, "request")
    if method == "GET" and not sealed:
        return None
    identity = {"method": method, "body_type": body_type, "body": body, "profile": public(sealed)}
    stored: dict[str, Any] = {"method": method, "key": json.dumps(identity, sort_keys=True)}
    if body is not None:
        stored |= {"body": body, "body_type": body_type}
    if sealed:
        stored["profile"] = sealed
    return stored
