"""The task list's filters, and how each is answered fast at a million tasks.

``status`` and the priority range are counted from the trigger-kept counters
(``forager.queue.counts``) instead of the table; ``url_contains`` first narrows to the
tasks whose URL has the text's trigrams (PostgreSQL: ``task_urls`` + pg_trgm GIN; SQLite: the
FTS5 trigram table ``task_urls_fts``), then keeps the exact ``LIKE`` so both engines match
the same rows. Texts under three characters have no trigram and fall back to the scan.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Depends, Query
from sqlalchemy import ColumnElement, Select, func, select, text, union_all
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import column, table

from forager.api.wire import Timestamp
from forager.db.models import CrawlTask, Domain
from forager.queue import counts
from forager.queue.lifecycle import TaskStatus

_pg_urls = table("task_urls", column("task_id"), column("url"))
TRIGRAM = 3


def _escaped_like(value: str) -> str:
    return "%" + value.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"


def url_candidates(dialect: str, contains: str) -> ColumnElement[bool] | None:
    """A condition that keeps only tasks whose URL may contain ``contains`` (trigram index)."""
    if len(contains) < TRIGRAM:
        return None
    if dialect == "postgresql":
        pattern = _escaped_like(contains)
        found = select(_pg_urls.c.task_id).where(_pg_urls.c.url.like(pattern, escape="/"))
        return CrawlTask.id.in_(found)
    phrase = '"' + contains.replace('"', '""') + '"'
    found_text = text("SELECT rowid FROM task_urls_fts WHERE task_urls_fts MATCH :url_phrase")
    return CrawlTask.id.in_(
        found_text.bindparams(url_phrase=phrase).columns(column("rowid")).scalar_subquery()
    )


@dataclass(frozen=True)
class TaskFilters:
    """What a task list is narrowed to; None means "any"."""

    status: TaskStatus | None = None
    domain: str | None = None
    batch_name: str | None = None
    created_by: str | None = None
    min_priority: int | None = None
    max_priority: int | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    completed_after: datetime | None = None
    completed_before: datetime | None = None
    url_contains: str | None = None

    def apply(self, query: Select[Any], dialect: str) -> Select[Any]:
        t = CrawlTask
        if self.status is not None:
            query = query.where(t.status == self.status.value)
        if self.domain is not None:
            query = query.join(Domain, Domain.id == t.domain_id).where(
                Domain.domain_name == self.domain.lower()
            )
        if self.url_contains:
            candidates = url_candidates(dialect, self.url_contains)
            if candidates is not None:
                query = query.where(candidates)
            query = query.where(t.url.contains(self.url_contains, autoescape=True))
        for col, value, compare in (
            (t.batch_name, self.batch_name, operator.eq),
            (t.created_by, self.created_by, operator.eq),
            # "+ 0": no index may serve a priority range (10 values: too coarse to narrow a
            # million rows), so SQLite walks ids newest first and stops at the page's end.
            (t.priority + 0, self.min_priority, operator.ge),
            (t.priority + 0, self.max_priority, operator.le),
            (t.created_at, self.created_after, operator.ge),
            (t.created_at, self.created_before, operator.lt),
            (t.completed_at, self.completed_after, operator.ge),
            (t.completed_at, self.completed_before, operator.lt),
        ):
            if value is not None:
                query = query.where(compare(col, value))
        return query

    @property
    def _counted(self) -> bool:
        """Whether only status and priority narrow the list (the counters know those)."""
        others = (
            self.domain,
            self.batch_name,
            self.created_by,
            self.created_after,
            self.created_before,
            self.completed_after,
            self.completed_before,
            self.url_contains,
        )
        return all(value is None for value in others)

    def _keeps(self, status: str, priority: int) -> bool:
        return (
            (self.status is None or status == self.status.value)
            and (self.min_priority is None or priority >= self.min_priority)
            and (self.max_priority is None or priority <= self.max_priority)
        )

    async def newest_page(
        self, session: AsyncSession, query: Select[Any], *, limit: int, offset: int
    ) -> list[CrawlTask]:
        """``query``'s page, newest first.

        A domain's tasks on SQLite are read one status at a time: within one (domain, status),
        ``ix_crawl_tasks_domain_status`` keeps its entries in id order (SQLite indexes end with
        the rowid), so each status gives its newest ``limit + offset`` ids without a sort, and
        the page is taken from those — instead of sorting every task of the domain (10,000 at
        a million tasks over 100 domains). PostgreSQL's planner sorts the domain's rows
        cheaply enough (a bitmap scan and a top-N heap sort).
        """
        newest = CrawlTask.id.desc()
        if (
            self.domain is None
            or self.status is not None
            or session.get_bind().dialect.name != "sqlite"
        ):
            return list(await session.scalars(query.order_by(newest).limit(limit).offset(offset)))
        ids = query.with_only_columns(CrawlTask.id)
        per_status = [
            select(
                ids.where(CrawlTask.status == status.value)
                .order_by(newest)
                .limit(limit + offset)
                .subquery()
            )
            for status in TaskStatus
        ]
        candidates = union_all(*per_status).scalar_subquery()
        page = select(CrawlTask).where(CrawlTask.id.in_(candidates))
        return list(await session.scalars(page.order_by(newest).limit(limit).offset(offset)))

    async def total(self, session: AsyncSession, query: Select[Any]) -> int:
        """How many tasks match: from the counters when they can tell, else counted."""
        if self._counted:
            by = await counts.by_status_and_priority(session)
            return sum(n for (status, priority), n in by.items() if self._keeps(status, priority))
        return await session.scalar(select(func.count()).select_from(query.subquery())) or 0


def task_filters(
    status: Annotated[TaskStatus | None, Query(description="Only tasks in this status.")] = None,
    domain: Annotated[str | None, Query(max_length=255, description="Domain name.")] = None,
    batch_name: Annotated[str | None, Query(max_length=255)] = None,
    created_by: Annotated[
        str | None, Query(max_length=100, description="The API key's name, or cli.")
    ] = None,
    min_priority: Annotated[int | None, Query(ge=1, le=10)] = None,
    max_priority: Annotated[
        int | None, Query(ge=1, le=10, description="Below min_priority: nothing matches.")
    ] = None,
    created_after: Annotated[Timestamp | None, Query()] = None,
    created_before: Annotated[Timestamp | None, Query()] = None,
    completed_after: Annotated[Timestamp | None, Query()] = None,
    completed_before: Annotated[Timestamp | None, Query()] = None,
    url_contains: Annotated[
        str | None, Query(max_length=2048, description="Text the URL contains.")
    ] = None,
) -> TaskFilters:
    return TaskFilters(
        status,
        domain,
        batch_name,
        created_by,
        min_priority,
        max_priority,
        created_after,
        created_before,
        completed_after,
        completed_before,
        url_contains,
    )


TaskFiltersDep = Annotated[TaskFilters, Depends(task_filters)]

# The task list's orders (``sort``): a leading "-" is newest first. Creation follows the id.
TASK_ORDERS: dict[str, tuple[Any, ...]] = {
    "-created": (CrawlTask.id.desc(),),
    "created": (CrawlTask.id.asc(),),
    "-updated": (CrawlTask.updated_at.desc(), CrawlTask.id.desc()),
    "updated": (CrawlTask.updated_at.asc(), CrawlTask.id.asc()),
}
TaskSort = Literal["-created", "created", "-updated", "updated"]
TaskSortDep = Annotated[
    TaskSort,
    Query(
        description="The order: by creation (the id) or last update; a leading - is newest "
        "first. Default -created."
    ),
]
