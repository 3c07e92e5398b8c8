"""Alembic environment: always run with a connection handed over by ``stores.sql.database``."""

from __future__ import annotations

from alembic import context

from stores.sql.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only the programmatic path is supported
    raise RuntimeError("run migrations through stores.sql.database.upgrade_schema")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
