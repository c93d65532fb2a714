"""The shard map against the settings (kit.store.shard_catalog), without a database:
where a URL points, and each way a map and the settings can disagree."""

from __future__ import annotations

import pytest

from kit.core.shard_map import parse_shard_map
from kit.settings import HOME_SHARD
from kit.store.shard_catalog import configured_map, locator_of, map_problem

HOME = "postgresql+psycopg://u:pw@db-0.internal:5433/cronfleet"
ONE = "postgresql+psycopg://u:pw@db-1.internal/cronfleet?sslmode=require"
SHARDS = {HOME_SHARD: HOME, "s1": ONE}


def test_a_locator_is_where_never_how_to_log_in() -> None:
    assert locator_of(HOME) == "db-0.internal:5433/cronfleet"
    assert locator_of(ONE) == "db-1.internal:5432/cronfleet"  # libpq's default port


def test_with_no_stored_map_every_partition_is_home_and_every_shard_named() -> None:
    shard_map = configured_map(SHARDS)
    assert shard_map.home == HOME_SHARD and shard_map.epoch == 0
    assert set(shard_map.owners) == {HOME_SHARD} and len(shard_map.owners) == 1024
    assert shard_map.locator("s1") == "db-1.internal:5432/cronfleet"
    assert map_problem(shard_map, SHARDS) is None


def _map(home: str = HOME_SHARD, **changes: object) -> dict[str, object]:
    mapping: dict[str, object] = {
        "home": home,
        "shards": {
            HOME_SHARD: {"locator": "db-0.internal:5433/cronfleet"},
            "s1": {"locator": "db-1.internal:5432/cronfleet"},
        },
        "ranges": [{"partitions": "0-1023", "shard": HOME_SHARD}],
    }
    return mapping | changes


@pytest.mark.parametrize(
    ("mapping", "settings", "said"),
    [
        (_map(home="s1", ranges=[{"partitions": "0-1023", "shard": "s1"}]), SHARDS,
         "the shard map's home is s1"),
        (_map(), {HOME_SHARD: HOME}, "names shard s1 (no partition), which CRONFLEET_SHARD_URLS"),
        (_map(ranges=[{"partitions": "0-9", "shard": "s1"},
                      {"partitions": "10-1023", "shard": HOME_SHARD}]),
         {HOME_SHARD: HOME}, "names shard s1 (partitions 0-9), which"),
        (_map(), {HOME_SHARD: HOME, "s1": HOME}, "shard s1: the shard map says "
         "db-1.internal:5432/cronfleet, its URL points at db-0.internal:5433/cronfleet"),
        (_map(ranges=[{"partitions": "0-511", "shard": HOME_SHARD},
                      {"partitions": "512-1023", "shard": "s1"}]), SHARDS,
         "puts partitions 512-1023 on shard s1, but this release still keeps every partition"),
    ],
)  # fmt: skip
def test_each_disagreement_is_one_line_naming_it(
    mapping: dict[str, object], settings: dict[str, str], said: str
) -> None:
    problem = map_problem(parse_shard_map(mapping), settings)
    assert problem is not None and said in problem, problem
    assert "\n" not in problem


def test_a_shard_in_the_settings_but_not_in_the_map_is_fine() -> None:
    """An empty server added ahead of a move: nothing routes to it yet."""
    mapping = _map(shards={HOME_SHARD: {"locator": "db-0.internal:5433/cronfleet"}})
    assert map_problem(parse_shard_map(mapping), SHARDS) is None
