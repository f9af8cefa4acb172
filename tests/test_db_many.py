"""``Many``: a statement run for many rows writes what SQLAlchemy's own executemany writes, on
both engines; what it cannot run as it is (a Python-side default) goes through SQLAlchemy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, insert, text, update

from forager.db.engine import Database
from forager.db.many import Many
from forager.db.models import Event
from forager.db.types import JsonDoc, UTCDateTime, utcnow

_EVENTS = Event.__table__
_PLUS_TWO = timezone(timedelta(hours=2))


def _events(kind: str) -> list[dict[str, Any]]:
    return [
        {
            "entity_type": kind,
            "entity_id": str(n),
            "event": f"e{n}",
            "details": {"to": "completed", "n": n, "price": "9.99", "nested": [1, None]},
            "created_at": datetime(2026, 3, 1, 1, 30, n, 5, tzinfo=_PLUS_TWO),
            "actor": None if n % 2 else "cli",
        }
        for n in range(3)
    ]


async def _stored(db: Database, kind: str) -> list[tuple[Any, ...]]:
    """The rows of ``kind`` as the database holds them (SQLite: the stored text itself)."""
    async with db.reader() as session:
        rows = await session.execute(
            text(
                "SELECT entity_id, event, details, created_at, actor FROM events"
                " WHERE entity_type = :kind ORDER BY id"
            ),
            {"kind": kind},
        )
        return [tuple(row) for row in rows]


async def test_rows_written_through_many_are_the_rows_sqlalchemy_writes(db: Database) -> None:
    async with db.session() as session:
        await session.execute(insert(_EVENTS), _events("by-sqlalchemy"))
        await Many(insert(_EVENTS)).execute(session, _events("by-many"))
    theirs, ours = await _stored(db, "by-sqlalchemy"), await _stored(db, "by-many")
    assert len(ours) == 3 and ours == theirs
    if db.is_sqlite:  # the bind processors ran: UTC text, JSON text
        assert ours[0][3] == "2026-02-28 23:30:00.000005"
        assert '"price": "9.99"' in ours[0][2]


async def test_an_update_with_a_value_fixed_in_the_statement(db: Database) -> None:
    statement = Many(
        update(_EVENTS)
        .where(_EVENTS.c.entity_id == bindparam("b_id"))
        .values(event=bindparam("b_event"), actor=None, created_at=bindparam("b_at"))
    )
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    async with db.session() as session:
        await Many(insert(_EVENTS)).execute(session, _events("updated"))
        await statement.execute(
            session,
            [
                {"b_id": "0", "b_event": "moved", "b_at": at},
                {"b_id": "2", "b_event": "x", "b_at": at},
            ],
        )
    stored = await _stored(db, "updated")
    assert [(row[0], row[1], row[4]) for row in stored] == [
        ("0", "moved", None),
        ("1", "e1", None),
        ("2", "x", None),
    ]
    if db.is_sqlite:
        assert stored[0][3] == "2026-01-02 03:04:05.000000"


async def test_a_naive_datetime_is_refused_and_nothing_is_written(db: Database) -> None:
    rows = _events("naive")
    rows[2]["created_at"] = datetime(2026, 1, 1)
    with pytest.raises(Exception, match="naive datetime given to a UTC column"):
        async with db.session() as session:
            await Many(insert(_EVENTS)).execute(session, rows)
    assert await _stored(db, "naive") == []


async def test_a_python_side_default_is_filled_in_by_sqlalchemy(db: Database) -> None:
    probe = Table(
        "many_probe",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("label", String(20)),
        Column("stamp", UTCDateTime, default=utcnow),
        Column("doc", JsonDoc),
    )
    async with db.engine.begin() as connection:
        await connection.run_sync(probe.metadata.create_all)
    before = utcnow()
    async with db.session() as session:
        await Many(insert(probe)).execute(
            session, [{"label": "a", "doc": {"k": 1}}, {"label": "b", "doc": None}]
        )
    async with db.reader() as session:
        rows = (await session.execute(probe.select().order_by(probe.c.id))).all()
    assert [(row.label, row.doc) for row in rows] == [("a", {"k": 1}), ("b", None)]
    assert all(row.stamp is not None and row.stamp >= before - timedelta(seconds=1) for row in rows)
