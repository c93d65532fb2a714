"""The migrations are the reviewed history of kit/store/schema.py: a freshly migrated
database must be exactly the models, or one of them drifted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import DateTime, Engine, inspect, text

from kit.store import migrate
from kit.store.migrations.names import include_name
from kit.store.run_history import is_run_partition
from kit.store.schema import metadata
from tests.unit.vocabulary_checks import CHECKED_COLUMNS, quoted

pytestmark = pytest.mark.integration


def test_migrated_schema_equals_models(engine: Engine) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "compare_server_default": True,
                "include_name": include_name,
            },
        )
        assert compare_metadata(context, metadata) == []


def test_trigger_index_is_the_primary_key_the_due_scan_needs(engine: Engine) -> None:
    inspector = inspect(engine)
    pk = inspector.get_pk_constraint("triggers")
    assert pk["constrained_columns"] == ["partition_id", "fire_at", "job_id", "kind"]
    assert ["job_id"] in [ix["column_names"] for ix in inspector.get_indexes("triggers")]


def test_every_instant_is_timestamptz(engine: Engine) -> None:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT table_name, column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = 'public' AND data_type LIKE 'timestamp%'"
            )
        ).all()
    # the day partitions of runs have runs' columns (checked as runs')
    rows = [(f"{t}.{c}", kind) for t, c, kind in rows if not is_run_partition(t)]
    assert {name for name, kind in rows if kind != "timestamp with time zone"} == set()
    modelled = {
        f"{table.name}.{column.name}"
        for table in metadata.sorted_tables
        for column in table.columns
        if isinstance(column.type, DateTime)
    }
    assert {name for name, _ in rows} == modelled
    assert "triggers.fire_at" in modelled and "runs.lease_expires_at" in modelled


def test_database_is_at_head(db_url: str) -> None:
    head = migrate.head_revision(db_url)
    assert head is not None
    assert migrate.current_revision(db_url) == head


def test_db_current_cli_reports_up_to_date(db_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "db", "current"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CRONFLEET_DATABASE_URL": db_url},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{migrate.head_revision(db_url)} (up to date)"


def test_migrated_constraints_are_the_cores_sets(engine: Engine) -> None:
    """The migrations are frozen text; the database they build must still allow exactly
    the core's closed sets (compare_metadata above does not compare CHECK constraints)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)"
                " FROM pg_constraint WHERE contype = 'c' AND connamespace = 'public'::regnamespace"
                " AND coninhcount = 0"  # a partition's copies of runs' own
            )
        ).all()
    in_lists = {(table, name): sql for table, name, sql in rows if "ANY" in sql or " IN " in sql}
    assert set(in_lists) == set(CHECKED_COLUMNS)
    for key, sql in in_lists.items():
        assert quoted(sql) == [v.value for v in CHECKED_COLUMNS[key]], (key, sql)
