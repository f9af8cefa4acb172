"""Column types that read the same on SQLite and PostgreSQL (where storage differs)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, DateTime, Dialect, Float, Integer, Numeric
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import JSON, TypeDecorator, TypeEngine

# SQLite only auto-increments an INTEGER PRIMARY KEY; PostgreSQL gets 64-bit ids.
BigId = BigInteger().with_variant(Integer(), "sqlite")

# JSONB on PostgreSQL (indexable, compact), JSON text on SQLite.
JsonDoc = JSON().with_variant(JSONB(), "postgresql")


def _in_utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive datetime is refused (which zone it means is unknown)."""
    if value.tzinfo is None:
        raise ValueError("naive datetime given to a UTC column")
    return value if value.tzinfo is UTC else value.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both engines.

    SQLite stores naive UTC text, so values must always be UTC before they are bound:
    comparisons there are text comparisons.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = _in_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        """On SQLite, the stored text in one step: the same text as ``process_bind_param`` and
        SQLite's ``DATETIME`` processor after it (the two cost ~4 % of a crawl's event loop)."""
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def to_text(value: datetime | None) -> str | None:
            if value is None:
                return None
            return _in_utc(value).replace(tzinfo=None).isoformat(" ", "microseconds")

        return to_text

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Money(TypeDecorator[Decimal]):
    """Exact two-decimal amounts: NUMERIC on PostgreSQL, REAL on SQLite read back exactly.

    A two-decimal value below 2**53 / 100 survives the float round trip, and REAL keeps
    SQLite's range filters and ordering numeric.
    """

    impl = Numeric(14, 2)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(Float())
        return dialect.type_descriptor(Numeric(14, 2))

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = Decimal(value).quantize(Decimal("0.01"))
        return float(value) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        return Decimal(repr(value) if isinstance(value, float) else value).quantize(Decimal("0.01"))


def utcnow() -> datetime:
    """The current time as an aware UTC datetime (the only clock the database layer uses)."""
    return datetime.now(UTC)
