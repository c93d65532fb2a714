"""`cronfleet db wait`, the gate every service of the fleet starts behind (ExecStartPre):
it holds while the schema is behind this code's migrations, and lets the code start on
its own head or on a newer revision it does not know (a later release's expand step),
which is what lets a rolling upgrade run two releases on one database."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from kit.settings import load_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def url() -> Iterator[str]:
    base = load_settings().database_url
    name = f"cf_it_{os.getpid()}_gate"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(base).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _db(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kit.cli", "db", *args],
        env={**os.environ, "CRONFLEET_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_gate_holds_behind_and_opens_at_head_or_newer(url: str) -> None:
    behind = _db(url, "wait", "--timeout-s", "0")
    assert behind.returncode == 1
    assert "schema behind: database at none" in behind.stderr and "gave up" in behind.stderr

    assert _db(url, "upgrade").returncode == 0
    at_head = _db(url, "wait", "--timeout-s", "0")
    assert at_head.returncode == 0 and "schema at head" in at_head.stdout, at_head

    # a later release migrated (expand only): this code starts on it
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_a_later_release'"))
    newer = _db(url, "wait", "--timeout-s", "0")
    assert newer.returncode == 0 and "schema newer" in newer.stdout, newer

    # an earlier revision this code knows: behind, held
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0010'"))
    engine.dispose()
    assert _db(url, "wait", "--timeout-s", "0").returncode == 1


def test_a_negative_timeout_is_refused(url: str) -> None:
    out = _db(url, "wait", "--timeout-s", "-1")
    assert out.returncode == 2 and "timeout-s" in out.stderr
