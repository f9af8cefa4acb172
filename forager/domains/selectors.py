"""A domain's selector parsers: saved versions of its selector map, the one in use, and the
stored pages a map can be previewed on (docs/PARSERS.md "Selector parsers")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from forager.db import audit
from forager.db.engine import Database
from forager.db.models import CrawlTask, Domain, SelectorMapVersion
from forager.db.queries import get_or_not_found, page
from forager.errors import NotFound
from forager.parse.selectors import SELECTOR, compile_map


@dataclass(frozen=True, slots=True)
class StoredPage:
    """A page of the domain in the page store, by the task that fetched it."""

    task_id: int
    url: str
    html_path: str
    fetched_at: datetime | None


async def _domain(session: AsyncSession, domain_id: int, *, lock: bool = False) -> Domain:
    missing = f"domain {domain_id} does not exist"
    return await get_or_not_found(session, Domain, domain_id, missing, with_for_update=lock)


async def _version(session: AsyncSession, domain_id: int, version: int) -> SelectorMapVersion:
    found = await session.scalar(
        select(SelectorMapVersion).where(
            SelectorMapVersion.domain_id == domain_id, SelectorMapVersion.version == version
        )
    )
    if found is None:
        raise NotFound(f"domain {domain_id} has no selector parser version {version}")
    return found


def _use(session: AsyncSession, domain: Domain, version: int, by: str) -> None:
    domain.selector_version = version
    domain.parser_name = SELECTOR
    audit.record(
        session, "domain", [domain.id], "selector_parser_used", {"version": version, "by": by}
    )


async def save(
    db: Database, domain_id: int, fields: dict[str, Any], note: str | None, *, use: bool, by: str
) -> tuple[SelectorMapVersion, bool]:
    """A new version of the domain's map (refused with ``InvalidRequest`` naming the bad
    rule); with ``use`` the domain's pages are parsed with it from now on."""
    compile_map(fields)
    async with db.session() as session:
        domain = await _domain(session, domain_id, lock=True)
        latest = await session.scalar(
            select(func.max(SelectorMapVersion.version)).where(
                SelectorMapVersion.domain_id == domain_id
            )
        )
        row = SelectorMapVersion(
            domain_id=domain_id, version=(latest or 0) + 1, fields=fields, note=note, created_by=by
        )
        session.add(row)
        await session.flush()
        if use:
            _use(session, domain, row.version, by)
        return row, domain.selector_version == row.version


async def use(db: Database, domain_id: int, version: int, by: str) -> SelectorMapVersion:
    """Parse the domain's pages with ``version`` from now on (a roll-back, or a new one)."""
    async with db.session() as session:
        domain = await _domain(session, domain_id, lock=True)
        row = await _version(session, domain_id, version)
        _use(session, domain, version, by)
        return row


async def versions(
    session: AsyncSession, domain_id: int, *, limit: int, offset: int
) -> tuple[list[SelectorMapVersion], int, int | None]:
    """The domain's versions, newest first, their total, and the version in use."""
    domain = await _domain(session, domain_id)
    query = select(SelectorMapVersion).where(SelectorMapVersion.domain_id == domain_id)
    rows, total = await page(
        session, query, SelectorMapVersion.version.desc(), limit=limit, offset=offset
    )
    return list(rows), total, _in_use(domain)


def _in_use(domain: Domain) -> int | None:
    return domain.selector_version if domain.parser_name == SELECTOR else None


async def current_parser(
    session: AsyncSession, domain_id: int
) -> tuple[str, tuple[int, int, dict[str, Any]] | None]:
    """The parser the domain's pages are read with now: its name and, for ``selector``, the
    map in use (domain id, version, fields), as a claimed task carries them."""
    domain = await _domain(session, domain_id)
    version = _in_use(domain)
    if version is None:
        return domain.parser_name, None
    row = await _version(session, domain_id, version)
    return SELECTOR, (domain_id, version, row.fields)


async def one(
    session: AsyncSession, domain_id: int, version: int
) -> tuple[SelectorMapVersion, bool]:
    """One version, and whether the domain uses it."""
    domain = await _domain(session, domain_id)
    return await _version(session, domain_id, version), _in_use(domain) == version


async def stored_pages(
    session: AsyncSession, domain_id: int, *, limit: int, offset: int
) -> tuple[list[StoredPage], int]:
    """The domain's pages in the page store (the newest fetch first), to preview a map on."""
    await _domain(session, domain_id)
    query = select(CrawlTask).where(
        CrawlTask.domain_id == domain_id, CrawlTask.html_path.is_not(None)
    )
    rows, total = await page(
        session, query, CrawlTask.updated_at.desc(), limit=limit, offset=offset
    )
    pages = [StoredPage(t.id, t.url, t.html_path or "", t.completed_at) for t in rows]
    return pages, total


async def stored_page(session: AsyncSession, domain_id: int, task_id: int) -> StoredPage:
    """The stored page of task ``task_id``, which must belong to the domain."""
    task = await session.get(CrawlTask, task_id)
    if task is None or task.domain_id != domain_id:
        raise NotFound(f"task {task_id} is not a task of domain {domain_id}")
    if task.html_path is None:
        raise NotFound(f"task {task_id} has no stored page")
    return StoredPage(task.id, task.url, task.html_path, task.completed_at)
