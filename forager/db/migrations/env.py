"""Alembic environment: runs on the connection Forager hands it (see ``forager.db.migrate``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from forager.db.migrate import include_object
from forager.db.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=include_object,
        # A caller may follow each step (``migrate.downgrade``'s ``on_step``).
        on_version_apply=config.attributes.get("on_version_apply", ()),
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `forager db upgrade`, which supplies the connection")
_run(connection)
