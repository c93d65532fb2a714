"""Migration 0016 adds the workers' per-tenant figures (`workers.tenants`) to a database
at 0015 with a worker's presence row in it, and its downgrade takes the column away
again, leaving the row."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Engine, make_url

from kit.store import migrate

pytestmark = pytest.mark.integration


@pytest.fixture
def at_0015(admin_engine: Engine) -> Iterator[str]:
    name = f"cf_it_{os.getpid()}_m0016"
    with admin_engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_engine.url.render_as_string(hide_password=False)).set(database=name)
    rendered = url.render_as_string(hide_password=False)
    migrate.upgrade(rendered, "0015")
    yield rendered
    with admin_engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def columns(engine: Engine) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns("workers")}


def test_upgrade_adds_the_tenants_column_and_downgrade_removes_it(at_0015: str) -> None:
    engine = create_engine(at_0015)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO workers (worker_id, heartbeat_at, concurrency) "
                    "VALUES ('w-1', now(), 4)"
                )
            )
        assert "tenants" not in columns(engine)
        migrate.upgrade(at_0015, "0016")
        assert "tenants" in columns(engine)
        with engine.begin() as conn:
            assert conn.execute(text("SELECT tenants FROM workers")).scalar_one() is None
            conn.execute(text("""UPDATE workers SET tenants = '{"a": {"started": 1}}'"""))
            got = conn.execute(text("SELECT tenants -> 'a' ->> 'started' FROM workers"))
            assert got.scalar_one() == "1"
        command.downgrade(migrate.alembic_config(at_0015), "0015")
        engine.dispose()  # the inspector's cached reflection
        assert "tenants" not in columns(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT worker_id FROM workers")).scalar_one() == "w-1"
    finally:
        engine.dispose()
