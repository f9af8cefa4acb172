"""New claimable work is announced to idle workers in other processes.

Every move that makes a task due now (a submit, restart, resume, restart of parsing, a due
recrawl, a reaped lease) calls ``new_work`` in its transaction: on PostgreSQL a
``NOTIFY forager_tasks`` that is delivered on commit, once per transaction; workers listening on
``NEW_WORK`` (``forager.db.listen``) claim at once instead of at their next poll. A retry with
backoff is due later and is not announced: the poll finds it. On SQLite it does nothing.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from forager.db.dialect import notify

NEW_WORK = "forager_tasks"


async def new_work(session: AsyncSession) -> None:
    """Tell listening workers, once the transaction commits, that work may be claimable."""
    await notify(session, NEW_WORK)
