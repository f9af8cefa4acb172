"""The high-water mark of a feed run: the last change number every earlier writer committed.

A run exports the rows whose change number lies in ``(cursor, high]``. That misses nothing
only if no transaction still open holds a number at or below ``high`` — otherwise its row,
committed after the run read past it, would fall behind the cursor for good.

- SQLite: writers serialize (``BEGIN IMMEDIATE``) and number their rows from the counter in
  ``feed_sequences``, so numbers follow commit order: the counter read in a snapshot is the
  high-water mark.
- PostgreSQL: sequence numbers are drawn in parallel and committed in any order. They are
  drawn by a BEFORE trigger, while the writing statement holds its table's ROW EXCLUSIVE
  lock; ``LOCK TABLE … IN SHARE MODE`` conflicts with it, so it is granted once every
  transaction that wrote the table has ended, and new writers wait for it. Under that lock
  ``max(number)`` is the high-water mark: every number below it is committed or rolled back,
  every later one is drawn after it. The lock is held for one index read, in a transaction of
  its own.

A row updated again gets a new, higher number, so a run that reads it in its range exports its
newest content and the next run exports the next; nothing is read twice at one number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, text

from forager.db.engine import Database
from forager.db.models import FeedSequence, Item, PriceHistory, Product


@dataclass(frozen=True, slots=True)
class Followed:
    """A kind's table and the column its cursor follows."""

    table: str
    column: Any


FOLLOWED: dict[str, Followed] = {
    "products": Followed("products", Product.change_seq),
    "items": Followed("items", Item.change_seq),
    "price_changes": Followed("price_history", PriceHistory.change_seq),
}


async def high_water(db: Database, kind: str) -> int:
    """The change number up to which every row of ``kind`` is committed (0: none yet)."""
    followed = FOLLOWED[kind]
    if db.is_sqlite:
        async with db.reader() as session:
            value = await session.scalar(
                select(FeedSequence.value).where(FeedSequence.name == followed.table)
            )
        return int(value or 0)
    async with db.session() as session:
        await session.execute(text(f"LOCK TABLE {followed.table} IN SHARE MODE"))
        value = await session.scalar(select(func.max(followed.column)))
    return int(value or 0)
