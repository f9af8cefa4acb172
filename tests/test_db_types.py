"""UTC datetimes on both engines: any offset in, the same instant out as UTC; SQLite stores naive
UTC text that sorts as time does; a naive datetime is refused before anything is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import insert, select, text

from forager.db.engine import Database
from forager.db.models import Event

_EVENTS = Event.__table__


async def test_utc_datetimes_are_stored_as_utc_and_read_back_aware(db: Database) -> None:
    plus_two = timezone(timedelta(hours=2))
    written = [
        datetime(2026, 3, 1, 1, 30, 0, 0, tzinfo=plus_two),  # 2026-02-28 23:30 UTC
        datetime(2026, 2, 28, 23, 45, 0, 5, tzinfo=UTC),
        datetime(999, 1, 2, 3, 4, 5, 120000, tzinfo=UTC),
    ]
    async with db.session() as session:
        await session.execute(
            insert(_EVENTS),
            [
                {"entity_type": "t", "entity_id": str(n), "event": "e", "created_at": at}
                for n, at in enumerate(written)
            ],
        )
    async with db.reader() as session:
        read = list(await session.scalars(select(Event.created_at).order_by(Event.created_at)))
        stored = list(await session.scalars(text("SELECT created_at FROM events ORDER BY id")))
    assert read == sorted(written) and all(at.tzinfo is UTC for at in read)
    if db.is_sqlite:  # naive UTC text, microseconds always written: text order is time order
        assert stored == [
            "2026-02-28 23:30:00.000000",
            "2026-02-28 23:45:00.000005",
            "0999-01-02 03:04:05.120000",
        ]


async def test_a_naive_datetime_is_refused(db: Database) -> None:
    with pytest.raises(Exception, match="naive datetime given to a UTC column"):
        async with db.session() as session:
            await session.execute(
                insert(_EVENTS),
                [
                    {
                        "entity_type": "t",
                        "entity_id": "1",
                        "event": "e",
                        "created_at": datetime(2026, 1, 1),
                    }
                ],
            )
    async with db.reader() as session:
        assert list(await session.scalars(select(Event.id))) == []
