"""Proxy pool administration: CRUD, enable/disable, bulk lines, the test fetch and statistics.

Passwords arrive in plain text, are encrypted here with ``SecretBox`` and leave only as
ciphertext in the ``proxies`` row; nothing in this module returns or records them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from sqlalchemy import case, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db import audit
from forager.db.engine import Database
from forager.db.models import Proxy
from forager.db.queries import get_or_not_found
from forager.db.types import utcnow
from forager.errors import Conflict, EgressDenied, FetchError, InvalidRequest
from forager.fetch.base import Fetcher, FetchRequest
from forager.fetch.egress import Resolver
from forager.proxies import health
from forager.proxies.health import mean
from forager.proxies.selection import proxy_url

PROTOCOLS = ("http", "https", "socks5")


# -- bulk lines ------------------------------------------------------------------------------


def parse_proxy_line(line: str) -> dict[str, Any]:
    """``scheme://user:pass@host:port`` (scheme defaults to http) as proxy column values."""
    text = line.strip()
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError("the port must be a number from 1 to 65535") from exc
    if parts.scheme not in PROTOCOLS:
        raise ValueError(f"the protocol must be one of {', '.join(PROTOCOLS)}")
    if not parts.hostname:
        raise ValueError("no host")
    if port is None:
        raise ValueError("no port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("a proxy line has no path, query or fragment")
    return {
        "proxy_protocol": parts.scheme,
        "proxy_url": parts.hostname,
        "proxy_port": port,
        "proxy_username": unquote(parts.username) if parts.username else None,
        "proxy_password": unquote(parts.password) if parts.password else None,
    }


def masked_line(line: str) -> str:
    """``line`` with the password part of its userinfo replaced by ``***``."""
    head, at, tail = line.strip().rpartition("@")
    if not at:
        return line.strip()
    scheme, sep, userinfo = head.rpartition("://")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{tail}"


# -- proxies ---------------------------------------------------------------------------------


async def get_proxy(session: AsyncSession, proxy_id: int) -> Proxy:
    return await get_or_not_found(session, Proxy, proxy_id, f"proxy {proxy_id} does not exist")


async def _same_proxy(
    session: AsyncSession, host: str, port: int, username: str | None, *, other_than: int = 0
) -> int | None:
    """The id of the proxy with this host, port and username, if any (besides ``other_than``)."""
    user = Proxy.proxy_username.is_(None) if username is None else Proxy.proxy_username == username
    found: int | None = await session.scalar(
        select(Proxy.id)
        .where(Proxy.proxy_url == host, Proxy.proxy_port == port, user, Proxy.id != other_than)
        .limit(1)
    )
    return found


def _encrypting(values: dict[str, Any], box: SecretBox) -> dict[str, Any]:
    """``values`` with ``proxy_password`` encrypted (an empty one clears it)."""
    if "proxy_password" not in values:
        return values
    plain = values["proxy_password"]
    return {**values, "proxy_password": box.encrypt(plain) if plain else None}


def _described(proxy: Proxy) -> dict[str, Any]:
    return {"proxy": f"{proxy.proxy_protocol}://{proxy.proxy_url}:{proxy.proxy_port}"}


async def create_proxies(
    db: Database, box: SecretBox, items: Sequence[dict[str, Any]]
) -> list[tuple[Literal["created", "duplicate"], int]]:
    """Insert proxies (validated column values); a known host+port+username is a duplicate."""
    results: list[tuple[Literal["created", "duplicate"], int]] = []
    async with db.session() as session:
        for values in items:
            same = await _same_proxy(
                session, values["proxy_url"], values["proxy_port"], values.get("proxy_username")
            )
            if same is not None:
                results.append(("duplicate", same))
                continue
            proxy = Proxy(**_encrypting(values, box))
            session.add(proxy)
            await session.flush()
            audit.record(session, "proxy", [proxy.id], "created", _described(proxy))
            results.append(("created", proxy.id))
    return results


async def refusal(host: str) -> str | None:
    """Why a proxy at ``host`` may not be saved: a link-local or metadata address (DESIGN.md
    decision 11); None when it may."""
    try:
        await Resolver().check_proxy(host)
    except EgressDenied as exc:
        return str(exc)
    return None


async def _check_host(host: str) -> None:
    why = await refusal(host)
    if why is not None:
        raise InvalidRequest(why, field="proxy_url")


async def create_proxy(db: Database, box: SecretBox, values: dict[str, Any]) -> Proxy:
    """Insert one proxy; ``Conflict`` when the same host+port+username exists."""
    await _check_host(values["proxy_url"])
    [(result, proxy_id)] = await create_proxies(db, box, [values])
    if result == "duplicate":
        raise Conflict(f"proxy {proxy_id} has the same host, port and username")
    async with db.reader() as session:
        return await get_proxy(session, proxy_id)


async def update_proxy(
    db: Database, box: SecretBox, proxy_id: int, changes: dict[str, Any]
) -> Proxy:
    """Apply ``changes`` (a new password is encrypted; an empty one clears it)."""
    if changes.get("proxy_url") is not None:
        await _check_host(changes["proxy_url"])
    async with db.session() as session:
        proxy = await get_proxy(session, proxy_id)
        for name, value in _encrypting(changes, box).items():
            setattr(proxy, name, value)
        same = await _same_proxy(
            session, proxy.proxy_url, proxy.proxy_port, proxy.proxy_username, other_than=proxy.id
        )
        if same is not None:
            raise Conflict(f"proxy {same} has the same host, port and username")
        if changes:
            audit.record(session, "proxy", [proxy_id], "updated", {"fields": sorted(changes)})
        await session.flush()
    return proxy


async def delete_proxy(db: Database, proxy_id: int) -> None:
    """Delete a proxy; its domain mappings go with it (ON DELETE CASCADE)."""
    async with db.session() as session:
        proxy = await get_proxy(session, proxy_id)
        audit.record(session, "proxy", [proxy_id], "deleted", _described(proxy))
        await session.execute(delete(Proxy).where(Proxy.id == proxy_id))


async def set_proxy_active(db: Database, proxy_id: int, *, active: bool) -> Proxy:
    """Enable (resetting ``failure_count``, seed 004) or disable a proxy everywhere."""
    async with db.session() as session:
        proxy = await get_proxy(session, proxy_id)
        proxy.is_active = active
        proxy.retest_at = None  # the operator decided: no background re-test either way
        proxy.retest_count = 0
        if active:
            proxy.failure_count = 0
        audit.record(session, "proxy", [proxy_id], "enabled" if active else "disabled")
        await session.flush()
    return proxy


def disabled_reason(proxy: Proxy) -> str | None:
    """Why a proxy is out of rotation, from what is stored; ``None`` while it is enabled.

    Health disabling (``FORAGER_PROXY_FAILURE_LIMIT`` consecutive failures) is the only
    path that sets ``retest_at``; an operator's enable or disable clears it.
    """
    if proxy.is_active:
        return None
    if proxy.retest_at is None:
        return "disabled by an operator"
    retests = proxy.retest_count
    failed = f", then {retests} failed re-test{'s' if retests != 1 else ''}" if retests else ""
    when = proxy.retest_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"failed {proxy.failure_count} times in a row{failed}; re-test at {when}"


# -- test fetch ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ok: bool
    status_code: int | None = None
    response_time_ms: int | None = None
    error_type: str | None = None
    error: str | None = None


async def _probe(fetcher: Fetcher, settings: Settings, via: str, url: str) -> ProbeResult:
    try:
        response = await fetcher.fetch(FetchRequest(url, settings.user_agent, via, fetcher="http"))
    except FetchError as exc:
        return ProbeResult(False, exc.status_code, None, exc.error_type, exc.message)
    return ProbeResult(True, response.status_code, response.elapsed_ms)


async def probe_proxy(
    db: Database,
    settings: Settings,
    box: SecretBox,
    fetcher: Fetcher,
    proxy_id: int,
    url: str,
) -> ProbeResult:
    """Fetch ``url`` with the HTTP fetcher (of the process's ``fetcher`` set) through the proxy
    and count the outcome on the proxy's health.

    The outcome is judged as every fetch through a proxy is (``health.verdict``); a test fetch
    has no domain, so a ban (which counts for one domain only) is not recorded.
    """
    async with db.reader() as session:
        via = proxy_url(await get_proxy(session, proxy_id), box)
    probe = await _probe(fetcher, settings, via, url)
    async with db.session() as session:
        await get_proxy(session, proxy_id)  # deleted meanwhile: 404 rather than a silent no-op
        await session.execute(
            update(Proxy)
            .where(Proxy.id == proxy_id)
            .values(last_test_at=utcnow(), last_test_ok=probe.ok)
            .execution_options(synchronize_session=False)
        )
        await health.record_verdict(
            session,
            proxy_id,
            health.verdict(probe.error_type),
            domain_id=None,
            response_ms=probe.response_time_ms,
            settings=settings,
        )
        details = {"url": url, "ok": probe.ok, "error_type": probe.error_type}
        audit.record(session, "proxy", [proxy_id], "tested", details)
    return probe


# -- statistics ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupCount:
    value: str | None
    total: int
    active: int


@dataclass(frozen=True, slots=True)
class ProxyStats:
    total: int
    active: int
    disabled: int
    avg_response_time_ms: float | None
    by_country: list[GroupCount]
    by_provider: list[GroupCount]


async def proxy_stats(session: AsyncSession) -> ProxyStats:
    """Counts of the whole pool, by country and by provider, and the mean response time."""
    active = func.count(case((Proxy.is_active.is_(True), 1)))
    total, active_total, avg_ms = (
        await session.execute(
            select(func.count(), active, func.avg(Proxy.avg_response_time_ms)).select_from(Proxy)
        )
    ).one()

    async def grouped(column: Any) -> list[GroupCount]:
        rows = await session.execute(
            select(column, func.count(), active).group_by(column).order_by(column.nulls_last())
        )
        return [GroupCount(value, n, up) for value, n, up in rows]

    return ProxyStats(
        total=total,
        active=active_total,
        disabled=total - active_total,
        avg_response_time_ms=mean(avg_ms),
        by_country=await grouped(Proxy.country_code),
        by_provider=await grouped(Proxy.provider),
    )
