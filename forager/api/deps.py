"""Dependencies shared by the routers (``Annotated`` aliases, as in FastAPI's own templates)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession

from forager.runtime import Runtime

__all__ = ["Runtime", "RuntimeDep"]


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def read_session(runtime: RuntimeDep) -> AsyncIterator[AsyncSession]:
    async with runtime.db.reader() as session:
        yield session


ReadSessionDep = Annotated[AsyncSession, Depends(read_session)]


@dataclass(frozen=True)
class Paging:
    limit: int
    offset: int


def paging(
    limit: Annotated[int, Query(ge=1, le=500, description="Rows per page.")] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000, description="Rows to skip.")] = 0,
) -> Paging:
    return Paging(limit, offset)


PagingDep = Annotated[Paging, Depends(paging)]


# Ids are 64-bit: anything outside is refused (422) before it reaches a database driver.
MAX_ID = 2**63 - 1
EntityId = Annotated[int, Path(ge=1, le=MAX_ID, description="A row id.")]
