"""Alembic environment: online migrations only, against the URL set by kit.store.migrate."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from kit.store.migrations.names import include_name
from kit.store.schema import metadata

config = context.config


def run_migrations_online() -> None:
    engine = create_engine(
        config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool, hide_parameters=True
    )
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            compare_type=True,
            compare_server_default=True,
            include_name=include_name,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit(
        "offline (SQL script) migrations are not supported; run `cronfleet db upgrade`"
    )
run_migrations_online()
