"""More than one PostgreSQL: `cronfleet db upgrade` migrates every shard the settings name,
and a service refuses to start on shards that do not answer or stand at different schema
revisions, with one line naming the shard, before it writes anything (docs/shards.md).

Two databases of the stack's server stand for two shards here; `stack up --shards N`
(tests/integration/test_stack.py) makes real separate clusters.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from kit.cli import main
from kit.settings import HOME_SHARD
from kit.store import migrate
from kit.store.shard_catalog import locator_of

pytestmark = pytest.mark.integration


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


# --- the shard map against the settings ----------------------------------------------


@pytest.fixture
def migrated_two(
    db_url: str, empty_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str]:
    migrate.upgrade(empty_db_url)
    monkeypatch.setenv("CRONFLEET_DATABASE_URL", db_url)
    monkeypatch.setenv("CRONFLEET_SHARD_URLS", f"shard1={empty_db_url}")
    return db_url, empty_db_url


def _store(home: str, mapping: dict[str, object], epoch: int = 0) -> None:
    engine = create_engine(home)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO shard_map (epoch, map, actor) VALUES (:e, :m, 'test')"),
                {"e": epoch, "m": json.dumps(mapping)},
            )
    finally:
        engine.dispose()


def _mapping(home: str, shard1: str, ranges: list[tuple[str, str]]) -> dict[str, object]:
    return {
        "home": HOME_SHARD,
        "shards": {
            HOME_SHARD: {"locator": locator_of(home)},
            "shard1": {"locator": locator_of(shard1)},
        },
        "ranges": [{"partitions": p, "shard": s} for p, s in ranges],
    }


def test_no_stored_map_means_every_partition_home_and_show_says_so(
    migrated_two: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["shards", "check"]) == 0
    assert main(["shards", "show"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^home \(home\)\s+\S+\s+1024\s+0-1023$", out, re.M), out
    assert re.search(r"^shard1\s+\S+\s+0\s+-$", out, re.M), out
    assert "no map stored" in out


def test_a_stored_map_placing_partitions_off_home_stops_every_service(
    migrated_two: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """This release writes every partition's rows on the home shard: a map that says
    otherwise would be a lie the services act on, so they refuse it (and write nothing)."""
    home, shard1 = migrated_two
    _store(home, _mapping(home, shard1, [("0-511", HOME_SHARD), ("512-1023", "shard1")]))
    for service in (["scheduler"], ["worker"], ["api"]):
        assert main(service) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "partitions 512-1023 on shard shard1" in err[0], err
        assert "move them back home" in err[0]
    assert _nodes(home) == 0


def test_a_stored_map_is_checked_against_the_settings(
    migrated_two: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home, shard1 = migrated_two
    _store(home, _mapping(home, shard1, [("0-1023", HOME_SHARD)]))
    assert main(["shards", "check"]) == 0  # stored, all home, locators agree
    # the same server under another name in the settings: the map's shard1 is missing
    monkeypatch.setenv("CRONFLEET_SHARD_URLS", f"other={shard1}")
    assert main(["scheduler"]) == 1
    assert "names shard shard1 (no partition), which CRONFLEET_SHARD_URLS does not" in (
        capsys.readouterr().err
    )
    # shard1's URL pointing at another database than the map's locator
    monkeypatch.setenv("CRONFLEET_SHARD_URLS", f"shard1={home}")
    assert main(["shards", "check"]) == 1
    err = capsys.readouterr().err
    assert f"shard shard1: the shard map says {locator_of(shard1)}, its URL points at" in err


def test_a_stored_row_that_is_no_map_is_named(
    migrated_two: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    home, shard1 = migrated_two
    _store(home, _mapping(home, shard1, [("0-1000", HOME_SHARD)]))
    assert main(["worker"]) == 1
    err = capsys.readouterr().err
    assert "the stored shard map (home shard, table shard_map)" in err
    assert "partitions 1001-1023 are on no shard" in err, err


def test_check_of_a_map_file_writes_nothing(
    migrated_two: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, shard1 = migrated_two
    lines = [f'home = "{HOME_SHARD}"']
    for name, url in ((HOME_SHARD, home), ("shard1", shard1)):
        lines += [f"[shards.{name}]", f'locator = "{locator_of(url)}"']
    good = tmp_path / "home.toml"
    good.write_text("\n".join([*lines, "[[ranges]]", 'partitions = "0-1023"', 'shard = "home"']))
    assert main(["shards", "check", "--map", str(good)]) == 0
    split = tmp_path / "split.toml"
    split.write_text(
        "\n".join(
            [*lines, "[[ranges]]", 'partitions = "0-511"', 'shard = "home"', "[[ranges]]",
             'partitions = "512-1023"', 'shard = "shard1"']
        )
    )  # fmt: skip
    assert main(["shards", "check", "--map", str(split)]) == 1
    assert "partitions 512-1023 on shard shard1" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("home = [")
    assert main(["shards", "check", "--map", str(bad)]) == 2
    assert "is not TOML" in capsys.readouterr().err
    engine = create_engine(home)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM shard_map")).scalar_one() == 0
    finally:
        engine.dispose()
