"""API hardening and the API at scale (issues 11 and 14).

- ``events.actor``: the API key (its name) or ``cli`` behind an event; NULL for workers.
- ``dashboard_logouts``: logged-out dashboard session nonces, kept until the session expires,
  so a logout survives a restart.
- ``proxies.hour_started_at`` / ``hour_requests``: the hourly request window that enforces
  ``max_requests_per_hour`` across processes.
- Task counters: triggers on ``crawl_tasks`` append signed deltas to ``task_count_deltas``
  (insert-only, so there is no hot row); ``forager.queue.counts`` folds them into
  ``task_counts`` (by status and priority) and ``task_counts_hourly`` (by creation hour and
  status, with completed_at - started_at sums). Every writer is counted, whatever its SQL.
- URL search: a trigram index over task URLs, written once per task by an insert trigger
  (PostgreSQL: ``task_urls`` + pg_trgm GIN; SQLite: the contentless FTS5 table
  ``task_urls_fts`` with the trigram tokenizer). Status changes never touch it.
- Product search on PostgreSQL reads a stored ``search_document`` tsvector (GIN) instead of
  recomputing ``to_tsvector`` per row for ranking; ``ix_products_updated_at`` gains ``id``.

A later SQLite batch migration that recreates ``crawl_tasks`` or ``products`` (move and copy)
drops their triggers with the table and must create them again from this module.

Revision ID: 0010
Revises: 0009
"""

# The DDL below is composed from this module's own constants (no input reaches it).
# ruff: noqa: S608

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import forager.db.types

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# -- SQLite -----------------------------------------------------------------------------

_SQLITE_HOUR = "CAST(strftime('%s', {r}.created_at) AS INTEGER) / 3600"
_SQLITE_TIMED = "({r}.started_at IS NOT NULL AND {r}.completed_at IS NOT NULL)"
_SQLITE_SECONDS = "coalesce((julianday({r}.completed_at) - julianday({r}.started_at)) * 86400.0, 0)"


def _sqlite_delta(r: str, sign: str) -> str:
    return (
        f"({r}.status, {r}.priority, {_SQLITE_HOUR.format(r=r)}, {sign}1, "
        f"{sign}{_SQLITE_TIMED.format(r=r)}, {sign}{_SQLITE_SECONDS.format(r=r)})"
    )


_DELTA_COLUMNS = "(status, priority, created_hour, n, duration_n, duration_sum)"
_COUNTED = ("status", "priority", "created_at", "started_at", "completed_at")

SQLITE_TRIGGERS = (
    f"""
    CREATE TRIGGER IF NOT EXISTS task_counts_insert AFTER INSERT ON crawl_tasks BEGIN
        INSERT INTO task_count_deltas {_DELTA_COLUMNS} VALUES {_sqlite_delta("new", "")};
        INSERT INTO task_urls_fts (rowid, url) VALUES (new.id, new.url);
    END
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS task_counts_delete AFTER DELETE ON crawl_tasks BEGIN
        INSERT INTO task_count_deltas {_DELTA_COLUMNS} VALUES {_sqlite_delta("old", "-")};
        INSERT INTO task_urls_fts (task_urls_fts, rowid, url) VALUES ('delete', old.id, old.url);
    END
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS task_counts_update AFTER UPDATE OF {", ".join(_COUNTED)}
    ON crawl_tasks
    WHEN {" OR ".join(f"old.{c} IS NOT new.{c}" for c in _COUNTED)}
    BEGIN
        INSERT INTO task_count_deltas {_DELTA_COLUMNS}
        VALUES {_sqlite_delta("old", "-")}, {_sqlite_delta("new", "")};
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS task_urls_update AFTER UPDATE OF url ON crawl_tasks
    WHEN old.url IS NOT new.url
    BEGIN
        INSERT INTO task_urls_fts (task_urls_fts, rowid, url) VALUES ('delete', old.id, old.url);
        INSERT INTO task_urls_fts (rowid, url) VALUES (new.id, new.url);
    END
    """,
)

# -- PostgreSQL -------------------------------------------------------------------------

_PG_HOUR = "floor(extract(epoch FROM {r}.created_at) / 3600)::bigint"
_PG_SECONDS = "extract(epoch FROM {r}.completed_at - {r}.started_at)"


def _pg_grouped(rows: str, sign: str) -> str:
    """Deltas of a whole statement's rows, one per (status, priority, hour)."""
    return (
        f"SELECT r.status, r.priority, {_PG_HOUR.format(r='r')}, {sign}count(*), "
        f"{sign}count(r.completed_at - r.started_at), "
        f"{sign}coalesce(sum({_PG_SECONDS.format(r='r')}), 0) "
        f"FROM {rows} r GROUP BY 1, 2, 3"
    )


def _pg_row(r: str, sign: str) -> str:
    timed = f"({r}.started_at IS NOT NULL AND {r}.completed_at IS NOT NULL)::int"
    return (
        f"({r}.status, {r}.priority, {_PG_HOUR.format(r=r)}, {sign}1, {sign}{timed}, "
        f"{sign}coalesce({_PG_SECONDS.format(r=r)}, 0))"
    )


PG_FUNCTIONS = (
    f"""
    CREATE OR REPLACE FUNCTION task_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO task_count_deltas {_DELTA_COLUMNS} {_pg_grouped("new_rows", "")};
        INSERT INTO task_urls (task_id, url) SELECT id, url FROM new_rows;
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE OR REPLACE FUNCTION task_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO task_count_deltas {_DELTA_COLUMNS} {_pg_grouped("old_rows", "-")};
        DELETE FROM task_urls WHERE task_id IN (SELECT id FROM old_rows);
        RETURN NULL;
    END $$
    """,
    # Row-level with a WHEN filter: updates that move nothing counted (heartbeats, lease
    # renewals) never call it.
    f"""
    CREATE OR REPLACE FUNCTION task_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO task_count_deltas {_DELTA_COLUMNS}
        VALUES {_pg_row("OLD", "-")}, {_pg_row("NEW", "")};
        RETURN NULL;
    END $$
    """,
    """
    CREATE OR REPLACE FUNCTION task_urls_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE task_urls SET url = NEW.url WHERE task_id = NEW.id;
        RETURN NULL;
    END $$
    """,
)

PG_TRIGGERS = (
    "CREATE TRIGGER task_counts_insert AFTER INSERT ON crawl_tasks "
    "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION task_counts_insert()",
    "CREATE TRIGGER task_counts_delete AFTER DELETE ON crawl_tasks "
    "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION task_counts_delete()",
    "CREATE TRIGGER task_counts_update AFTER UPDATE ON crawl_tasks FOR EACH ROW WHEN ("
    + " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in _COUNTED)
    + ") EXECUTE FUNCTION task_counts_update()",
    "CREATE TRIGGER task_urls_update AFTER UPDATE OF url ON crawl_tasks FOR EACH ROW "
    "WHEN (OLD.url IS DISTINCT FROM NEW.url) EXECUTE FUNCTION task_urls_update()",
)

_PG_DOCUMENT = (
    "to_tsvector('simple'::regconfig, product_name || ' ' || coalesce(brand, '') || ' ' || "
    "coalesce(description, ''))"
)


def _create_tables() -> None:
    op.create_table(
        "task_count_deltas",
        sa.Column("id", _ID, nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("created_hour", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("duration_n", sa.Integer(), nullable=False),
        sa.Column("duration_sum", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "task_counts",
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("status", "priority"),
    )
    op.create_table(
        "task_counts_hourly",
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("duration_n", sa.BigInteger(), nullable=False),
        sa.Column("duration_sum", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("hour", "status"),
    )
    op.create_table(
        "dashboard_logouts",
        sa.Column("nonce", sa.String(length=64), nullable=False),
        sa.Column("expires_at", forager.db.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("nonce"),
    )
    op.create_index("ix_dashboard_logouts_expires_at", "dashboard_logouts", ["expires_at"])
    with op.batch_alter_table("events") as batch_op:
        batch_op.add_column(sa.Column("actor", sa.String(length=100), nullable=True))
    with op.batch_alter_table("proxies") as batch_op:
        batch_op.add_column(
            sa.Column("hour_started_at", forager.db.types.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("hour_requests", sa.Integer(), nullable=False, server_default="0")
        )


# Counts of the rows already there (an upgrade of a live database), once the triggers exist:
# on PostgreSQL the trigger DDL locks out writers until commit, so nothing is missed.
_BACKFILL = (
    "INSERT INTO task_counts (status, priority, n) "
    "SELECT status, priority, count(*) FROM crawl_tasks GROUP BY status, priority",
    "INSERT INTO task_counts_hourly (hour, status, n, duration_n, duration_sum) "
    "SELECT {hour}, status, count(*), sum({timed}), coalesce(sum({seconds}), 0) "
    "FROM crawl_tasks r GROUP BY 1, 2",
)


def _backfill(dialect: str) -> None:
    if dialect == "sqlite":
        hour, timed, seconds = _SQLITE_HOUR, _SQLITE_TIMED, _SQLITE_SECONDS
    else:
        hour, seconds = _PG_HOUR, _PG_SECONDS
        timed = "(r.started_at IS NOT NULL AND r.completed_at IS NOT NULL)::int"
    op.execute(_BACKFILL[0])
    op.execute(
        _BACKFILL[1].format(
            hour=hour.format(r="r"), timed=timed.format(r="r"), seconds=seconds.format(r="r")
        )
    )


def upgrade() -> None:
    _create_tables()
    # The product list orders by (updated_at, id): with id in the index, a page is a walk.
    op.drop_index("ix_products_updated_at", table_name="products")
    op.create_index("ix_products_updated_at", "products", ["updated_at", "id"])
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS task_urls_fts USING fts5("
            "url, content='', tokenize='trigram')"
        )
        for trigger in SQLITE_TRIGGERS:
            op.execute(trigger)
        op.execute("INSERT INTO task_urls_fts (rowid, url) SELECT id, url FROM crawl_tasks")
    else:
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        # No foreign key (the delete trigger removes a task's row): the models cannot declare
        # this PostgreSQL-only table, and it must not pin crawl_tasks against a drop_all.
        op.execute(
            "CREATE TABLE IF NOT EXISTS task_urls (task_id bigint PRIMARY KEY, url text NOT NULL)"
        )
        op.execute(
            "CREATE INDEX IF NOT EXISTS task_urls_trgm ON task_urls USING gin (url gin_trgm_ops)"
        )
        for statement in (*PG_FUNCTIONS, *PG_TRIGGERS):
            op.execute(statement)
        op.execute("DELETE FROM task_urls")
        op.execute("INSERT INTO task_urls (task_id, url) SELECT id, url FROM crawl_tasks")
        op.execute(
            f"ALTER TABLE products ADD COLUMN search_document tsvector "
            f"GENERATED ALWAYS AS ({_PG_DOCUMENT}) STORED"
        )
        op.execute("DROP INDEX IF EXISTS ix_products_search")
        op.execute("CREATE INDEX ix_products_search ON products USING gin (search_document)")
    _backfill(dialect)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for name in ("task_counts_insert", "task_counts_delete", "task_counts_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TRIGGER IF EXISTS task_urls_update")
        op.execute("DROP TABLE IF EXISTS task_urls_fts")
    else:
        for name in ("task_counts_insert", "task_counts_delete", "task_counts_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON crawl_tasks")
            op.execute(f"DROP FUNCTION IF EXISTS {name}()")
        op.execute("DROP TRIGGER IF EXISTS task_urls_update ON crawl_tasks")
        op.execute("DROP FUNCTION IF EXISTS task_urls_update()")
        op.execute("DROP TABLE IF EXISTS task_urls")
        op.execute("DROP INDEX IF EXISTS ix_products_search")
        op.execute("ALTER TABLE products DROP COLUMN IF EXISTS search_document")
        op.execute(f"CREATE INDEX ix_products_search ON products USING gin ({_PG_DOCUMENT})")
    with op.batch_alter_table("proxies") as batch_op:
        batch_op.drop_column("hour_requests")
        batch_op.drop_column("hour_started_at")
    with op.batch_alter_table("events") as batch_op:
        batch_op.drop_column("actor")
    op.drop_index("ix_dashboard_logouts_expires_at", table_name="dashboard_logouts")
    op.drop_index("ix_products_updated_at", table_name="products")
    op.create_index("ix_products_updated_at", "products", ["updated_at"])
    for table in ("dashboard_logouts", "task_counts_hourly", "task_counts", "task_count_deltas"):
        op.drop_table(table)
