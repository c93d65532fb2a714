"""More than one PostgreSQL: `cronfleet db upgrade` migrates every shard the settings name,
and a service refuses to start on shards that do not answer or stand at different schema
revisions, with one line naming the shard, before it writes anything (docs/shards.md).

Two databases of the stack's server stand for two shards here; `stack up --shards N`
(tests/integration/test_stack.py) makes real separate clusters.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from kit.cli import main
from kit.store import migrate
from tests.integration.conftest import _PREFIX, _url_for

pytestmark = pytest.mark.integration


@pytest.fixture
def empty_db_url(admin_engine: Engine) -> Iterator[str]:
    """A database never migrated: a shard just added to the settings."""
    name = f"{_PREFIX}{os.getpid()}_shard_{uuid.uuid4().hex[:12]}"
    with admin_engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield _url_for(admin_engine.url.render_as_string(hide_password=False), name)
    with admin_engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def two_shards(db_url: str, empty_db_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """The home shard at this code's head, shard1 a release behind it."""
    migrate.upgrade(empty_db_url, "0015")
    monkeypatch.setenv("CRONFLEET_DATABASE_URL", db_url)
    monkeypatch.setenv("CRONFLEET_SHARD_URLS", f"shard1={empty_db_url}")
    return db_url, empty_db_url


def _nodes(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM scheduler_nodes")).scalar_one())
    finally:
        engine.dispose()


def test_a_service_refuses_shards_at_different_revisions_and_writes_nothing(
    two_shards: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    home, _ = two_shards
    assert main(["shards", "check"]) == 1
    said = capsys.readouterr()
    head = migrate.head_revision(home)
    assert f"home at {head}" in said.err and "shard1 at 0015" in said.err, said.err
    for service in (["scheduler"], ["worker"], ["reaper"], ["maintenance"], ["api"]):
        assert main(service) == 1, service
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "shards at different schema revisions" in err[0], err
    assert _nodes(home) == 0  # the scheduler never joined: nothing written


def test_db_upgrade_migrates_every_shard(
    two_shards: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    home, shard1 = two_shards
    assert main(["db", "upgrade"]) == 0
    out = capsys.readouterr().out
    assert "shard home" in out and "shard shard1" in out, out
    head = migrate.head_revision(home)
    assert migrate.current_revision(home) == migrate.current_revision(shard1) == head
    assert main(["shards", "check"]) == 0
    assert main(["db", "current"]) == 0
    assert main(["db", "wait", "--timeout-s", "0"]) == 0


def test_db_wait_waits_for_the_shard_behind(
    two_shards: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "wait", "--timeout-s", "0"]) == 1
    assert "shard shard1 at 0015" in capsys.readouterr().err
    assert main(["db", "current"]) == 1


def test_a_shard_never_migrated_is_named(
    db_url: str,
    empty_db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CRONFLEET_DATABASE_URL", db_url)
    monkeypatch.setenv("CRONFLEET_SHARD_URLS", f"fresh={empty_db_url}")
    assert main(["worker"]) == 1
    assert "shard fresh was never migrated" in capsys.readouterr().err


def test_a_shard_that_does_not_answer_is_named_and_its_password_is_not(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a port nothing listens on (1 is privileged, never the stack's)
    monkeypatch.setenv("CRONFLEET_DATABASE_URL", db_url)
    down = "postgresql+psycopg://cronfleet:s3cret-pw@127.0.0.1:1/cronfleet"
    monkeypatch.setenv("CRONFLEET_SHARD_URLS", f"far={down}")
    assert main(["scheduler"]) == 1
    err = capsys.readouterr().err
    assert "shard far (postgresql+psycopg://cronfleet:***@127.0.0.1:1/cronfleet)" in err, err
    assert "does not answer" in err and "s3cret-pw" not in err
    assert _nodes(db_url) == 0


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("shard1", "pair 1 ('shard1'): not NAME=URL"),
        ("home=postgresql://h/d", "`home` is the database_url's shard"),
        ("a=postgresql://h/d,a=postgresql://h/e", "pair 2 ('a'): named twice"),
        ("Big=postgresql://h/d", "a shard's name must be a plain identifier"),
    ],
)
def test_bad_shard_urls_are_refused_naming_the_setting(
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    value: str,
    reason: str,
) -> None:
    monkeypatch.setenv("CRONFLEET_DATABASE_URL", db_url)
    monkeypatch.setenv("CRONFLEET_SHARD_URLS", value)
    assert main(["shards", "check"]) == 2
    err = capsys.readouterr().err
    assert "CRONFLEET_SHARD_URLS" in err and reason in err, err
