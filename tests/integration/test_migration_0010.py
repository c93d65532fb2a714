"""Migration 0010 on a database that already has runs: rows that broke the new rule (a
token on a finished run, a running run without one) are repaired, then the constraint
holds. Written against 0009's schema, as a kit upgraded in place would have it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import IntegrityError

from kit.store import migrate

pytestmark = pytest.mark.integration


@pytest.fixture
def at_0009(admin_engine: Engine) -> Iterator[str]:
    name = f"cf_it_{os.getpid()}_m0010"
    with admin_engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_engine.url.render_as_string(hide_password=False)).set(database=name)
    rendered = url.render_as_string(hide_password=False)
    migrate.upgrade(rendered, "0009")
    yield rendered
    with admin_engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _insert(engine: Engine, status: str, token: str | None) -> str:
    run_id = str(uuid.uuid4())
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (run_id, job_id, tenant, job_version, scheduled_at, status, "
                "trigger_kind, lease_token) VALUES (:r, :j, 'acme', 1, now(), :s, 'schedule', :t)"
            ),
            {"r": run_id, "j": str(uuid.uuid4()), "s": status, "t": token},
        )
    return run_id


def test_upgrade_repairs_rows_then_enforces_the_rule(at_0009: str) -> None:
    engine = create_engine(at_0009)
    try:
        stale = _insert(engine, "succeeded", "left-over")
        orphan = _insert(engine, "running", None)
        held = _insert(engine, "running", "t-held")
        migrate.upgrade(at_0009, "0010")  # (0011 re-keys run ids: test_run_history)
        with engine.connect() as conn:
            rows = {
                r.run_id: r
                for r in conn.execute(
                    text("SELECT run_id::text, status, lease_token, lease_expires_at FROM runs")
                )
            }
        assert rows[stale].lease_token is None and rows[stale].status == "succeeded"
        # a running run with no token gets one nobody holds, and an expiry: the reaper
        # takes it over (at-least-once), rather than the migration failing
        assert rows[orphan].lease_token is not None and rows[orphan].lease_expires_at is not None
        assert rows[held].lease_token == "t-held"
        with pytest.raises(IntegrityError, match="ck_runs_lease_token"):
            _insert(engine, "pending", "not-a-lease")
    finally:
        engine.dispose()
