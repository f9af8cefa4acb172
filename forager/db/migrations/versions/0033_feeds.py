"""Feeds (issue 35): scheduled exports, their runs, and the change numbers their cursors follow;
completion webhooks of tasks and batches.

``products.change_seq`` and ``items.change_seq`` are set by triggers at each insert and each
content change (products: ``updated_at`` moved; items: ``changed_at`` moved). PostgreSQL draws
them from one sequence per table in a BEFORE trigger, so a number is taken while the statement
holds its ROW EXCLUSIVE lock (forager/feeds/cursor.py relies on that); SQLite counts in
``feed_sequences`` from an AFTER trigger (writers serialize, so numbers follow commit order).
Existing rows are numbered once here. Plain ADD COLUMN and CREATE TABLE: no table copy (a later
SQLite migration that copies ``products`` or ``items`` must create these triggers again).

Revision ID: 0033
Revises: 0032
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

# The SQL below is built from this module's own table names only.
# ruff: noqa: S608

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = forager.db.types.UTCDateTime
# table -> the column whose change is a content change (price history: rows are only inserted;
# numbered all the same, since SQLite gives a deleted last row's id to the next row)
_FOLLOWED = {"products": "updated_at", "items": "changed_at", "price_history": None}


def _sqlite_triggers(table: str, moved: str | None) -> list[str]:
    number = (
        f"UPDATE feed_sequences SET value = value + 1 WHERE name = '{table}'; "
        f"UPDATE {table} SET change_seq = "
        f"(SELECT value FROM feed_sequences WHERE name = '{table}') WHERE id = new.id;"
    )
    triggers = [
        f"CREATE TRIGGER {table}_change_seq_insert AFTER INSERT ON {table} BEGIN {number} END"
    ]
    if moved is not None:
        triggers.append(
            f"CREATE TRIGGER {table}_change_seq_update AFTER UPDATE OF {moved} ON {table} "
            f"WHEN old.{moved} IS NOT new.{moved} BEGIN {number} END"
        )
    return triggers


def _pg_triggers(table: str, moved: str | None) -> list[str]:
    triggers = [
        f"CREATE SEQUENCE IF NOT EXISTS feed_{table}_seq",
        f"UPDATE {table} SET change_seq = nextval('feed_{table}_seq')",
        f"CREATE OR REPLACE FUNCTION feed_{table}_seq() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN NEW.change_seq := nextval('feed_{table}_seq'); RETURN NEW; END $$",
        f"CREATE TRIGGER {table}_change_seq_insert BEFORE INSERT ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION feed_{table}_seq()",
    ]
    if moved is not None:
        triggers.append(
            f"CREATE TRIGGER {table}_change_seq_update BEFORE UPDATE ON {table} FOR EACH ROW "
            f"WHEN (OLD.{moved} IS DISTINCT FROM NEW.{moved}) EXECUTE FUNCTION feed_{table}_seq()"
        )
    return triggers


def upgrade() -> None:
    op.create_table(
        "feed_sequences",
        sa.Column("name", sa.String(length=30), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "feeds",
        sa.Column("id", _ID, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("format", sa.String(length=10), nullable=False),
        sa.Column("domain", sa.String(length=255), nullable=True),
        sa.Column("batch_name", sa.String(length=255), nullable=True),
        sa.Column("tag", sa.String(length=50), nullable=True),
        sa.Column("item_kind", sa.String(length=50), nullable=True),
        sa.Column("destination", sa.String(length=10), nullable=False),
        sa.Column("path", sa.String(length=200), nullable=False),
        sa.Column("interval_seconds", sa.Integer(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("cursor", sa.BigInteger(), nullable=False),
        sa.Column("next_run_at", _TS(), nullable=False),
        sa.Column("lease_owner", sa.String(length=100), nullable=True),
        sa.Column("lease_expires_at", _TS(), nullable=True),
        sa.Column("created_at", _TS(), nullable=False),
        sa.Column("updated_at", _TS(), nullable=False),
        sa.CheckConstraint("kind IN ('products', 'items', 'price_changes')", name="ck_feeds_kind"),
        sa.CheckConstraint("format IN ('jsonl', 'csv', 'parquet')", name="ck_feeds_format"),
        sa.CheckConstraint("destination IN ('directory', 'store')", name="ck_feeds_destination"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_index("ix_feeds_due", "feeds", ["enabled", "next_run_at"])
    op.create_table(
        "feed_runs",
        sa.Column("id", _ID, nullable=False),
        sa.Column("feed_id", _ID, nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("from_seq", sa.BigInteger(), nullable=False),
        sa.Column("to_seq", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=True),
        sa.Column("bytes", sa.BigInteger(), nullable=True),
        sa.Column("file", sa.String(length=300), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", _TS(), nullable=False),
        sa.Column("finished_at", _TS(), nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'failed', 'succeeded')", name="ck_feed_runs_status"
        ),
        sa.ForeignKeyConstraint(["feed_id"], ["feeds.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_feed_runs_feed", "feed_runs", ["feed_id", "id"])
    op.create_table(
        "completion_hooks",
        sa.Column("id", _ID, nullable=False),
        sa.Column("rule_id", _ID, nullable=False),
        sa.Column("task_id", _ID, nullable=True),
        sa.Column("batch_name", sa.String(length=255), nullable=True),
        sa.Column("created_at", _TS(), nullable=False),
        sa.Column("fired_at", _TS(), nullable=True),
        sa.CheckConstraint(
            "(task_id IS NULL) <> (batch_name IS NULL)", name="ck_completion_hooks_subject"
        ),
        sa.ForeignKeyConstraint(["rule_id"], ["alert_rules.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["task_id"], ["crawl_tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_completion_hooks_batch", "completion_hooks", ["batch_name"])
    op.create_index("ix_completion_hooks_task_id", "completion_hooks", ["task_id"])
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table, moved in _FOLLOWED.items():
        op.add_column(table, sa.Column("change_seq", sa.BigInteger(), nullable=True))
        if sqlite:
            op.execute(f"UPDATE {table} SET change_seq = id")
            op.execute(
                f"INSERT INTO feed_sequences (name, value) "
                f"SELECT '{table}', coalesce(max(id), 0) FROM {table}"
            )
            statements = _sqlite_triggers(table, moved)
        else:
            statements = _pg_triggers(table, moved)
        for statement in statements:
            op.execute(statement)
        op.create_index(f"ix_{table}_change_seq", table, ["change_seq"])


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table in _FOLLOWED:
        op.drop_index(f"ix_{table}_change_seq", table_name=table)
        on = "" if sqlite else f" ON {table}"
        for trigger in ("insert", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS {table}_change_seq_{trigger}{on}")
        if not sqlite:
            op.execute(f"DROP FUNCTION IF EXISTS feed_{table}_seq()")
            op.execute(f"DROP SEQUENCE IF EXISTS feed_{table}_seq")
        op.drop_column(table, "change_seq")
    op.drop_index("ix_completion_hooks_task_id", table_name="completion_hooks")
    op.drop_index("ix_completion_hooks_batch", table_name="completion_hooks")
    op.drop_table("completion_hooks")
    op.drop_index("ix_feed_runs_feed", table_name="feed_runs")
    op.drop_table("feed_runs")
    op.drop_index("ix_feeds_due", table_name="feeds")
    op.drop_table("feeds")
    op.drop_table("feed_sequences")
